package sim

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/keyspace"
)

// Book is the simulation's own account of one table of counters, kept
// outside the code under test: every push while it is in flight and once
// it is acknowledged, every clock a worker sends, and every read with the
// values it returned. Events are numbered in the order workers record
// them, which is enough to say which pushes a worker had acknowledged
// before it sent a given clock, and which began after a slot lost every
// copy (Copies numbers its losses in the same sequence).
type Book struct {
	// touch is told of every slot a push is about to reach.
	touch func(slot uint64)

	mu       sync.Mutex
	events   int64
	acked    map[uint64]int64 // acknowledged increments by key
	inflight map[*Push]struct{}
	ranks    map[int]*rankLog
	reads    []Read
	// ackTimes are when increments were acknowledged (fake time), in
	// order, one per key: the unstreamed round's bound (issue 11).
	ackTimes []time.Time
}

// Push is one push the book follows.
type Push struct {
	rank  int
	keys  []uint64
	begun int64
}

// rankLog is one worker rank's history.
type rankLog struct {
	ticks []tickRec           // clocks sent, increasing
	acks  map[uint64][]ackRec // by key, in the order acknowledged
}

type tickRec struct{ clock, event int64 }

// ackRec is one acknowledged increment: when it was acknowledged, and when
// its push began.
type ackRec struct{ at, begun int64 }

// Read is one read a worker made, as the book keeps it for Staleness.
type Read struct {
	Rank      int
	Clock     int64 // the reader's clock
	Staleness int   // the table's bound
	Keys      []uint64
	Values    []float32
	// Finished lists the ranks the coordinator had declared dead or
	// departed once the read returned: servers no longer wait for them.
	Finished []int
	event    int64
}

// NewBook returns an empty book that tells touch (if not nil) of every
// slot a push is about to reach.
func NewBook(touch func(slot uint64)) *Book {
	return &Book{touch: touch, acked: map[uint64]int64{}, inflight: map[*Push]struct{}{}, ranks: map[int]*rankLog{}}
}

func (b *Book) rankLocked(r int) *rankLog {
	l := b.ranks[r]
	if l == nil {
		l = &rankLog{acks: map[uint64][]ackRec{}}
		b.ranks[r] = l
	}
	return l
}

// Mark returns a new event number: a point in the book's sequence.
func (b *Book) Mark() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events++
	return b.events
}

// Pushing records a push of +1 to each of keys that rank is about to send;
// until Ack it may be applied or not.
func (b *Book) Pushing(rank int, keys []uint64) *Push {
	if b.touch != nil {
		for i, k := range keys {
			if i == 0 || keyspace.Slot(k) != keyspace.Slot(keys[i-1]) {
				b.touch(keyspace.Slot(k))
			}
		}
	}
	p := &Push{rank: rank, keys: slices.Clone(keys)}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events++
	p.begun = b.events
	b.inflight[p] = struct{}{}
	return p
}

// Ack records that p was acknowledged: each of its keys holds its +1.
func (b *Book) Ack(p *Push) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.inflight, p)
	b.events++
	l := b.rankLocked(p.rank)
	now := time.Now()
	for _, k := range p.keys {
		b.acked[k]++
		b.ackTimes = append(b.ackTimes, now)
		l.acks[k] = append(l.acks[k], ackRec{b.events, p.begun})
	}
}

// Tick records that rank is about to send clock (every push it has
// acknowledged so far comes before it).
func (b *Book) Tick(rank int, clock int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.rankLocked(rank)
	if n := len(l.ticks); n > 0 && l.ticks[n-1].clock >= clock {
		return
	}
	b.events++
	l.ticks = append(l.ticks, tickRec{clock, b.events})
}

// Read records a read that returned.
func (b *Book) Read(r Read) {
	r.Keys, r.Values, r.Finished = slices.Clone(r.Keys), slices.Clone(r.Values), slices.Clone(r.Finished)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events++
	r.event = b.events
	b.reads = append(b.reads, r)
}

// Reads returns every read recorded.
func (b *Book) Reads() []Read {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.reads)
}

// CheckRead checks read r under the staleness bound: servers answered it
// once every worker they count had sent a clock of at least r.Clock −
// r.Staleness, so the value of each key must hold every increment a worker
// acknowledged before it sent such a clock (before the read returned).
// Ranks in r.Finished are exempt. Increments whose push began before the
// key's slot last lost every copy, before the read (lostAt, from Copies),
// are not owed. It returns a description of the first violation, or "".
func (b *Book) CheckRead(r Read, lostAt func(slot uint64, before int64) int64) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	need := r.Clock - int64(r.Staleness)
	if need <= 0 {
		return "" // every clock starts at 0: no read waits for anything
	}
	type cutoff struct {
		rank  int
		event int64
	}
	var cuts []cutoff
	for w, l := range b.ranks {
		if slices.Contains(r.Finished, w) {
			continue
		}
		i := sort.Search(len(l.ticks), func(i int) bool { return l.ticks[i].clock >= need })
		if i < len(l.ticks) && l.ticks[i].event < r.event {
			cuts = append(cuts, cutoff{w, l.ticks[i].event})
		}
	}
	for j, k := range r.Keys {
		lost := lostAt(keyspace.Slot(k), r.event)
		var want int64
		var from []string
		for _, c := range cuts {
			n := int64(0)
			for _, a := range b.ranks[c.rank].acks[k] {
				if a.at >= c.event {
					break
				}
				if a.begun > lost {
					n++
				}
			}
			if n > 0 {
				want += n
				from = append(from, fmt.Sprintf("rank %d: %d", c.rank, n))
			}
		}
		if got := int64(r.Values[j]); got < want {
			return fmt.Sprintf("rank %d read key %d (slot %d) at clock %d (bound %d) = %d, but %d increments were acknowledged before their workers reached clock %d (%s)",
				r.Rank, k, keyspace.Slot(k), r.Clock, r.Staleness, got, want, need, strings.Join(from, ", "))
		}
	}
	return ""
}

// Uncertain returns, by key, the increments of pushes that were neither
// acknowledged nor known to have failed (their worker was killed or gave
// up while they were in flight): each may be applied once or not at all.
func (b *Book) Uncertain() map[uint64]int64 {
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

// InFlight counts the pushes that were neither acknowledged nor known to
// have failed (Uncertain's, not by key).
func (b *Book) InFlight() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int64(len(b.inflight))
}

// Acked returns the acknowledged increments of key k whose push began
// after event since (0: all of them).
func (b *Book) Acked(k uint64, since int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if since == 0 {
		return b.acked[k]
	}
	var n int64
	for _, l := range b.ranks {
		for _, a := range l.acks[k] {
			if a.begun > since {
				n++
			}
		}
	}
	return n
}

// Count returns the acknowledged increments of key k for which keep,
// given the events at which the push began and was acknowledged, is true.
func (b *Book) Count(k uint64, keep func(begun, at int64) bool) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for _, l := range b.ranks {
		for _, a := range l.acks[k] {
			if keep(a.begun, a.at) {
				n++
			}
		}
	}
	return n
}

// Keys returns, in order, every key a push was recorded for.
func (b *Book) Keys() []uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := map[uint64]bool{}
	for k := range b.acked {
		seen[k] = true
	}
	for p := range b.inflight {
		for _, k := range p.keys {
			seen[k] = true
		}
	}
	out := make([]uint64, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Totals returns the increments acknowledged and the reads recorded.
func (b *Book) Totals() (acked, reads int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.acked {
		acked += n
	}
	return acked, int64(len(b.reads))
}

// MostAckedWithin is the most increments acknowledged within any window
// of length w: one sync interval's worth, what a revocation without notice
// may lose of an ActivePS's acknowledged pushes (docs/design/tiers.md, I2).
func (b *Book) MostAckedWithin(w time.Duration) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	best, lo := 0, 0
	for hi, t := range b.ackTimes {
		for t.Sub(b.ackTimes[lo]) > w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return int64(best)
}
