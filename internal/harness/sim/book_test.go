package sim_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// book is the simulation's own account of what happened, kept outside the
// code under test: every push while it is in flight and once it is
// acknowledged, and every clock a worker sends. Events are numbered in the
// order the workers record them, which is enough to say which pushes a
// worker had acknowledged before it sent a given clock.
type book struct {
	mu       sync.Mutex
	events   int64
	acked    map[uint64]int64 // acknowledged increments by key
	inflight map[*pushRec]struct{}
	ranks    map[int]*rankLog
	reads    int64
}

type pushRec struct {
	rank int
	keys []uint64
}

// rankLog is one worker rank's history.
type rankLog struct {
	ticks []tickRec          // clocks sent, increasing
	acks  map[uint64][]int64 // by key, the events at which increments were acknowledged
}

type tickRec struct{ clock, event int64 }

func newBook() *book {
	return &book{acked: map[uint64]int64{}, inflight: map[*pushRec]struct{}{}, ranks: map[int]*rankLog{}}
}

func (b *book) rankLocked(r int) *rankLog {
	l := b.ranks[r]
	if l == nil {
		l = &rankLog{acks: map[uint64][]int64{}}
		b.ranks[r] = l
	}
	return l
}

// pushing records a push about to be sent; until acked it may be applied
// or not.
func (b *book) pushing(rank int, keys []uint64) *pushRec {
	p := &pushRec{rank: rank, keys: slices.Clone(keys)}
	b.mu.Lock()
	b.inflight[p] = struct{}{}
	b.mu.Unlock()
	return p
}

// ack records that p was acknowledged: each of its keys holds its +1.
func (b *book) ack(p *pushRec) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.inflight, p)
	b.events++
	l := b.rankLocked(p.rank)
	for _, k := range p.keys {
		b.acked[k]++
		l.acks[k] = append(l.acks[k], b.events)
	}
}

// tick records that rank is about to send clock (every push it has
// acknowledged so far comes before it).
func (b *book) tick(rank int, clock int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.rankLocked(rank)
	if n := len(l.ticks); n > 0 && l.ticks[n-1].clock >= clock {
		return
	}
	b.events++
	l.ticks = append(l.ticks, tickRec{clock, b.events})
}

// checkRead checks a read that worker rank made at clock under staleness
// bound s: the server answered once every worker it counts had sent a
// clock of at least clock−s, so the value of each key must hold every
// increment that a worker acknowledged before it sent such a clock. Ranks
// in finished (declared dead or departed, as the coordinator listed them
// after the read) are exempt: servers stop waiting for them. It returns a
// description of the first violation, or "".
func (b *book) checkRead(rank int, clock int64, s int, keys []uint64, vals []float32, finished []int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads++
	need := clock - int64(s)
	if need <= 0 {
		return "" // every clock starts at 0: no read waits for anything
	}
	type cutoff struct {
		rank  int
		event int64
	}
	var cuts []cutoff
	for w, l := range b.ranks {
		if slices.Contains(finished, w) {
			continue
		}
		i := sort.Search(len(l.ticks), func(i int) bool { return l.ticks[i].clock >= need })
		if i < len(l.ticks) {
			cuts = append(cuts, cutoff{w, l.ticks[i].event})
		}
	}
	for j, k := range keys {
		var want int64
		var from []string
		for _, c := range cuts {
			ev := b.ranks[c.rank].acks[k]
			n := int64(sort.Search(len(ev), func(i int) bool { return ev[i] >= c.event }))
			if n > 0 {
				want += n
				from = append(from, fmt.Sprintf("rank %d: %d", c.rank, n))
			}
		}
		if got := int64(vals[j]); got < want {
			return fmt.Sprintf("rank %d read key %d (slot %d) at clock %d (bound %d) = %d, but %d increments were acknowledged before their workers reached clock %d (%s)",
				rank, k, k/64, clock, s, got, want, need, strings.Join(from, ", "))
		}
	}
	return ""
}

// uncertain returns, by key, the increments of pushes that were neither
// acknowledged nor known to have failed (their worker was killed or gave
// up while they were in flight): each may be applied once or not at all.
func (b *book) uncertain() map[uint64]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := map[uint64]int64{}
	for p := range b.inflight {
		for _, k := range p.keys {
			u[k]++
		}
	}
	return u
}

// ackedCount returns the acknowledged increments of key k.
func (b *book) ackedCount(k uint64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acked[k]
}

func (b *book) totals() (acked, reads int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.acked {
		acked += n
	}
	return acked, b.reads
}

// TestBookCatchesStaleRead: the staleness check is not vacuous.
func TestBookCatchesStaleRead(t *testing.T) {
	b := newBook()
	// Rank 0 pushes key 7 at clocks 0 and 1, ending each.
	for clock := range int64(2) {
		b.ack(b.pushing(0, []uint64{7}))
		b.tick(0, clock+1)
	}
	b.tick(1, 2)
	keys := []uint64{7}
	for _, c := range []struct {
		clock    int64
		bound    int
		val      float32
		finished []int
		stale    bool
	}{
		{clock: 2, bound: 0, val: 2},
		{clock: 2, bound: 0, val: 1, stale: true},        // misses rank 0's push at clock 1
		{clock: 2, bound: 1, val: 1},                     // clock 1 is within the bound
		{clock: 3, bound: 1, val: 1, stale: true},        // rank 0 reached 2 after both pushes
		{clock: 2, bound: 0, val: 0, finished: []int{0}}, // rank 0 declared dead: exempt
		{clock: 9, bound: 0, val: 2},                     // rank 0 never sent clock 9: nothing more is owed
	} {
		msg := b.checkRead(1, c.clock, c.bound, keys, []float32{c.val}, c.finished)
		if (msg != "") != c.stale {
			t.Errorf("read %v at clock %d, bound %d, finished %v: %q", c.val, c.clock, c.bound, c.finished, msg)
		}
	}
	b.pushing(1, []uint64{7, 8})
	if u := b.uncertain(); u[7] != 1 || u[8] != 1 || b.ackedCount(7) != 2 {
		t.Errorf("uncertain %v, acknowledged %d", u, b.ackedCount(7))
	}
}
