package ps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// Reassign configures rapid reassignment (FlexRR; docs/design/
// stragglers.md): workers tell a group of peers their progress, and a
// worker with nothing left to take in a pass takes the unprocessed tail
// of a slow peer's piece through the coordinator's split protocol.
type Reassign struct {
	// Peers carries the progress messages (PeerHub in one process).
	Peers Peers
	// Group is how many peers each worker tells its progress (3 if 0):
	// the next Group ranks of the layout's workers after its own.
	Group int
	// Every is how often a worker tells them (25 ms if 0).
	Every time.Duration
	// Threshold is the least time a split must save to be made (4 of the
	// helper's own minibatch times if 0).
	Threshold time.Duration
	// MinRows is the smallest tail worth taking (the helper's minibatch
	// if 0, or if that is more).
	MinRows int
}

// ReassignStats counts what a worker's reassignment did.
type ReassignStats struct {
	// Reassignments is how many tails of peers' pieces this worker took.
	Reassignments int64 `json:"reassignments"`
	// ExamplesReassigned is how many rows it trained in those tails.
	ExamplesReassigned int64 `json:"examples_reassigned"`
	// Refused is how many splits it asked for were refused (no_split).
	Refused int64 `json:"splits_refused"`
	// SplitSeconds is how long it waited for the coordinator's answers.
	SplitSeconds float64 `json:"split_seconds"`
}

// Defaults of Reassign's fields.
const (
	defaultPeerGroup = 3
	defaultPeerEvery = 25 * time.Millisecond
	// peerStale is how old a peer's position may be to act on it.
	peerStale = time.Second
)

// reassigner is a client's side of peer progress and reassignment.
type reassigner struct {
	c *Client
	o Reassign

	mu     sync.Mutex
	pos    PeerProgress // this worker's; Partition -1 when it holds nothing
	cur    *Lease       // the lease being trained, for peers' cut requests
	rate   float64      // rows per second, exponentially weighted
	last   time.Time    // the previous boundary of cur
	batch  int          // the loop's minibatch, the least tail worth taking
	stolen map[uint64]bool
	board  map[int]peerSeen

	reassignments, reassigned, refused atomic.Int64
	waited                             atomic.Int64 // nanoseconds in Split
}

// Reassign turns on rapid reassignment for this worker, until ctx ends.
// Call it once, before the worker trains; its goroutines send and
// receive peer messages.
func (c *Client) Reassign(ctx context.Context, o Reassign) error {
	if o.Peers == nil || c.opts.Rank < 0 {
		return fmt.Errorf("%w: reassignment needs Peers and a worker's client", ErrBadArgument)
	}
	if c.rr != nil {
		return fmt.Errorf("%w: reassignment is already on", ErrBadArgument)
	}
	if o.Group <= 0 {
		o.Group = defaultPeerGroup
	}
	if o.Every <= 0 {
		o.Every = defaultPeerEvery
	}
	if o.MinRows <= 0 {
		o.MinRows = 1
	}
	rr := &reassigner{c: c, o: o, pos: PeerProgress{Pass: -1, Partition: -1}, stolen: map[uint64]bool{}, board: map[int]peerSeen{}}
	c.rr = rr
	go rr.receive(ctx)
	go rr.report(ctx)
	return nil
}

// ReassignStats returns what reassignment did on this worker so far.
func (c *Client) ReassignStats() ReassignStats {
	if c.rr == nil {
		return ReassignStats{}
	}
	return ReassignStats{Reassignments: c.rr.reassignments.Load(), ExamplesReassigned: c.rr.reassigned.Load(), Refused: c.rr.refused.Load(),
		SplitSeconds: time.Duration(c.rr.waited.Load()).Seconds()}
}

// holding records the lease the loop trains (nil: none).
func (rr *reassigner) holding(r *leaseRun) {
	if rr == nil {
		return
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if r == nil {
		rr.cur = nil
		rr.pos.Partition, rr.pos.Start, rr.pos.Offset, rr.pos.End = -1, 0, 0, 0
		return
	}
	rr.cur, rr.batch, rr.last = r.l, r.loop.Batch, time.Now()
	rr.pos = PeerProgress{Pass: r.l.Pass, Partition: r.l.Partition, Start: r.l.Start, Offset: r.off, End: r.end, Rate: rr.rate}
}

// moved records a minibatch of n rows trained. The rate counts the time
// from the previous boundary, the loop's own work included: what a peer
// must plan with.
func (rr *reassigner) moved(r *leaseRun, n int, _ time.Duration) {
	if rr == nil {
		return
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	now := time.Now()
	took := now.Sub(rr.last)
	rr.last = now
	if s := took.Seconds(); s > 0 {
		v := float64(n) / s
		if rr.rate == 0 {
			rr.rate = v
		} else {
			rr.rate = 0.7*rr.rate + 0.3*v
		}
	}
	rr.pos.Offset, rr.pos.End, rr.pos.Rate = r.off, r.end, rr.rate
	if rr.stolen[r.l.grant] {
		rr.reassigned.Add(int64(n))
	}
}

// report tells the group this worker's position every o.Every.
func (rr *reassigner) report(ctx context.Context) {
	t := time.NewTicker(rr.o.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rr.mu.Lock()
		p := rr.pos
		rr.mu.Unlock()
		for _, to := range rr.group() {
			rr.o.Peers.Send(to, PeerMessage{Progress: &p})
		}
	}
}

// group is the ranks this worker reports to: the next Group ranks after
// its own among the layout's workers, passing over those the layout
// lists as finished (dead, departed or done: none of them takes work).
// Computed at every report, so that it re-forms as soon as the layout's
// membership changes.
func (rr *reassigner) group() []int {
	w, me := 0, rr.c.opts.Rank
	var gone []int
	if l := rr.c.Layout(); l != nil {
		w, gone = l.Workers, l.Finished
	}
	var g []int
	for i := 1; i < w && len(g) < rr.o.Group; i++ {
		if r := (me + i) % w; !slices.Contains(gone, r) {
			g = append(g, r)
		}
	}
	return g
}

// receive takes in peers' positions and cut requests.
func (rr *reassigner) receive(ctx context.Context) {
	in := rr.o.Peers.Receive()
	for {
		var m PeerMessage
		select {
		case <-ctx.Done():
			return
		case m = <-in:
		}
		rr.mu.Lock()
		if m.Progress != nil {
			rr.board[m.From] = peerSeen{p: *m.Progress, at: time.Now()}
		}
		if k := m.Cut; k != nil && rr.cur != nil && rr.pos.Pass == k.Pass && rr.pos.Partition == k.Partition && k.From < rr.pos.End {
			// The loop takes it at its next boundary, as a request in a
			// progress reply; one already there stands.
			rr.cur.cutFrom.CompareAndSwap(-1, int64(max(k.From, 0)))
		}
		rr.mu.Unlock()
	}
}

// target is a peer's piece worth splitting, and the row to split it at.
type target struct {
	rank, partition, from, end int
}

// pick chooses, among the peers heard from, the one whose piece of pass
// has the most time left, and the row from which this worker takes its
// tail: its share if it and the k − 1 other idle peers each take one, so
// that all finish together with the peer; false if no split would save
// Threshold.
func (rr *reassigner) pick(pass int) (target, bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	now := time.Now()
	mine, least := rr.rate, max(rr.o.MinRows, rr.batch)
	// The idle peers will help too: each takes its share in turn.
	helpers := 1
	for _, s := range rr.board {
		if s.p.Pass == pass && s.p.Idle && now.Sub(s.at) <= peerStale {
			helpers++
		}
	}
	best, bestLeft := target{}, 0.0
	for rank, s := range rr.board {
		p := s.p
		age := now.Sub(s.at)
		if p.Pass != pass || p.Idle || p.Partition < 0 || p.Rate <= 0 || age > peerStale {
			continue
		}
		if mine == 0 {
			mine = p.Rate // no minibatch of its own yet: assume a peer's pace
		}
		at := p.Offset + int(p.Rate*age.Seconds())
		left := p.End - at
		if left < least {
			continue
		}
		x := int(float64(left) * mine / (float64(helpers)*mine + p.Rate))
		saved := float64(left)/p.Rate - max(float64(left-x)/p.Rate, float64(x)/mine)
		threshold := rr.o.Threshold.Seconds()
		if threshold == 0 {
			threshold = 4 * float64(least) / mine
		}
		if x < least || saved < threshold || saved <= bestLeft {
			continue
		}
		best, bestLeft = target{rank: rank, partition: p.Partition, from: p.End - x, end: p.End}, saved
	}
	return best, bestLeft > 0
}

// waitOrHelp waits for the answer to an Acquire of pass (got), and, while
// it is parked because no piece is free, looks for a peer to help. To
// help, it cancels the Acquire first (a grant that raced the cancel is
// work, and is used), then asks the peer and the coordinator for the
// tail (help); if the split is refused it asks for work again.
func (rr *reassigner) waitOrHelp(ctx context.Context, pass int, got <-chan acquired, cancel context.CancelFunc) acquired {
	rr.setIdle(pass, true)
	defer rr.setIdle(pass, false)
	t := time.NewTicker(rr.o.Every)
	defer t.Stop()
	for {
		select {
		case r := <-got:
			return r
		case <-t.C:
		}
		tg, ok := rr.pick(pass)
		if !ok {
			continue
		}
		cancel()
		if r := <-got; r.err == nil || ctx.Err() != nil {
			return r
		}
		l, err := rr.help(ctx, pass, tg)
		switch {
		case err == nil:
			return acquired{stolen: l}
		case !errors.Is(err, ErrNoSplit):
			return acquired{err: err}
		}
		got, cancel = rr.c.acquireAsync(ctx, pass)
		defer cancel()
	}
}

// help takes the tail of tg's piece from row tg.from: the coordinator is
// asked to split there (or for a free piece, if one is left: the Acquire
// may have been slow, not parked), and, unless it answers at once, the
// peer to cut there at its next boundary.
func (rr *reassigner) help(ctx context.Context, pass int, tg target) (*Lease, error) {
	began := time.Now()
	ask := time.AfterFunc(rr.o.Every, func() {
		rr.o.Peers.Send(tg.rank, PeerMessage{Cut: &PeerCut{Pass: pass, Partition: tg.partition, From: tg.from}})
	})
	l, err := rr.c.split(ctx, api.Split{Rank: rr.c.opts.Rank, Pass: pass, Partition: tg.partition, From: tg.from, AnyFree: true})
	ask.Stop()
	rr.waited.Add(int64(time.Since(began)))
	if err != nil {
		if errors.Is(err, ErrNoSplit) {
			rr.refused.Add(1)
		}
		return nil, err
	}
	rr.reassignments.Add(1)
	rr.mu.Lock()
	rr.stolen[l.grant] = true
	rr.mu.Unlock()
	rr.c.log.Debug("took a peer's tail", "pass", pass, "partition", tg.partition, "from", l.Start, "peer", tg.rank)
	return l, nil
}

func (rr *reassigner) setIdle(pass int, idle bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.pos.Pass, rr.pos.Idle = pass, idle
}
