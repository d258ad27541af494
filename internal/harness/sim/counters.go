package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// CountersTable is the table Counters trains.
const CountersTable = "counters"

// Counters is the simulation's standard job, made to be checked: one SSP
// table of counters; every worker trains leased partitions of Rows
// minibatches for Passes passes, recording progress every ProgressEvery
// minibatches. A minibatch reads its keys (KeysPerStep of Keys, the same
// whoever trains it) and every rank's own "hot" counter, computes for
// 2–25 fake ms, pushes +1 to its keys and its hot counter, waits for the
// acknowledgement, and ends its clock. It records all of it in the Book,
// and keeps, as partition state, how many times each row was trained,
// checked at every Complete (KindLostState). Zero fields take the
// defaults written on them; Staleness 0 is a bound of 0.
type Counters struct {
	Keys          int // 1500
	KeysPerStep   int // 10
	Rows          int // 30
	Passes        int // 2
	ProgressEvery int // 4
	Staleness     int
	// Reassign turns on rapid reassignment (ps.Client.Reassign): a worker
	// with no piece left takes the tail of a slow peer's, and the
	// partition state, which counts each row's training, splits with it.
	Reassign bool
	// HotOnly pushes only the rank's hot counter: one key, so one part
	// and one (client, seq) pair per push, and the increments a run loses
	// are the pushes it loses: the unit of the tiers' loss ledger.
	HotOnly bool
	// BSP makes the table bulk-synchronous (Staleness is then ignored):
	// its pushes wait on their heads until their clock completes, and are
	// acknowledged before then (docs/design/resilience.md, "BSP").
	BSP bool
	// NoState keeps no partition state (KindLostState is then not
	// checked): a job with partition states never goes back to a
	// checkpoint (coordinator --on-copies-lost resume), which the
	// rewind mix needs.
	NoState bool
}

func (w Counters) withDefaults() Counters {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&w.Keys, 1500)
	def(&w.KeysPerStep, 10)
	def(&w.Rows, 30)
	def(&w.Passes, 2)
	def(&w.ProgressEvery, 4)
	return w
}

// staleness is the bound reads are checked against: BSP's is 0.
func (w Counters) staleness() int {
	if w.BSP {
		return 0
	}
	return w.Staleness
}

// HotKey is rank r's own counter, which every minibatch of r increments
// and every read includes: the sharpest test of the staleness bound.
func (w Counters) HotKey(r int) uint64 {
	return uint64(w.withDefaults().Keys) + uint64(r)*keyspace.SlotSize
}

// Run trains: leased partitions, pass by pass.
func (w Counters) Run(ctx context.Context, c *Cluster, n *Node, cl *ps.Client) error {
	w = w.withDefaults()
	rank := cl.Rank()
	cons := table.Consistency{Model: table.SSP, Staleness: w.Staleness}
	if w.BSP {
		cons = table.Consistency{Model: table.BSP}
	}
	tb, err := cl.CreateTable(ctx, table.Spec{Name: CountersTable, Width: 1, Consistency: cons})
	if err != nil {
		return err
	}
	if !w.NoState {
		cl.KeepState(func(int) ps.PartitionState { return &trained{rows: make([]uint8, w.Rows)} })
	}
	if w.Reassign {
		if err := cl.Reassign(ctx, ps.Reassign{Peers: c.peers.Peers(rank)}); err != nil {
			return err
		}
		defer func() {
			if n := cl.ReassignStats().Reassignments; n > 0 {
				c.stolen.Add(n)
				c.Note("rank %d took %d tails of slow peers' pieces", rank, n)
			}
		}()
	}
	order := make([]int, w.Rows)
	for i := range order {
		order[i] = i
	}
	for pass := 0; pass < w.Passes; pass++ {
		n.Status("rank %d: asking for work in pass %d at clock %d", rank, pass, cl.Clock())
		err := cl.EachPartition(ctx, pass, w.loop(c, n, cl, tb, pass, order))
		if errors.Is(err, api.ErrRewound) {
			// The cluster went back to a checkpoint: the passes start
			// again from the first, as ps.RunPasses does; those the
			// checkpoint holds are done at once.
			c.Note("rank %d starts its passes again: %v", rank, err)
			pass = -1
			continue
		}
		if err != nil {
			return err
		}
		// The pass's barrier may have moved the clock up.
		c.book.Tick(rank, cl.Clock())
	}
	n.Status("rank %d: finishing", rank)
	c.book.Tick(rank, 1<<63-1)
	return cl.Finish().Wait(ctx)
}

// loop trains leased partitions of one pass, a row a minibatch, through
// the partition loop that every app uses.
func (w Counters) loop(c *Cluster, n *Node, cl *ps.Client, tb *ps.Table, pass int, order []int) ps.Loop {
	rank := cl.Rank()
	return ps.Loop{
		Order: func(int, int) []int { return order },
		Batch: 1, ProgressEvery: w.ProgressEvery,
		Begin: func(context.Context, *ps.Lease) error {
			// A worker that waited for this lease comes back at the
			// highest clock reported (wire.ClockIdle): Work sent it.
			c.book.Tick(rank, cl.Clock())
			return nil
		},
		Step: func(ctx context.Context, b ps.Batch) (*ps.Future, error) {
			if err := w.step(ctx, c, n, cl, tb, pass, b.Lease.Partition, b.Lo); err != nil {
				return nil, fmt.Errorf("minibatch %d: %w", b.Lo, err)
			}
			st, ok := b.Lease.State().(*trained)
			if !ok {
				return nil, nil // Counters.NoState
			}
			if st.rows[b.Lo] == notHeld {
				c.Violate(KindLostState, "rank %d pass %d partition %d: row %d trained outside its piece [%d, %d)", rank, pass, b.Lease.Partition, b.Lo, b.Lease.Start, b.Lease.End())
			}
			st.rows[b.Lo]++
			return nil, nil
		},
		Completed: func(l *ps.Lease) {
			// Rows a dead worker trained past its last progress are
			// trained again, but each is in the state once per pass.
			if st, ok := l.State().(*trained); ok { // not with Counters.NoState
				if r := slices.IndexFunc(st.rows, func(t uint8) bool { return t != notHeld && int(t) != pass+1 }); r >= 0 {
					c.Violate(KindLostState, "rank %d pass %d partition %d: row %d trained %d times by the state's account", rank, pass, l.Partition, r, st.rows[r])
				}
			}
			n.Status("rank %d: asking for work in pass %d at clock %d", rank, pass, cl.Clock())
		},
	}
}

// step is one minibatch: read, compute, push +1, end the clock.
func (w Counters) step(ctx context.Context, c *Cluster, n *Node, cl *ps.Client, tb *ps.Table, pass, part, off int) error {
	rank := cl.Rank()
	// The same minibatch touches the same keys whoever trains it.
	r := rand.New(rand.NewPCG(c.Seed(), uint64(pass)<<40|uint64(part)<<20|uint64(off)))
	set := map[uint64]bool{w.HotKey(rank): true}
	for len(set) < w.KeysPerStep+1 && !w.HotOnly {
		set[r.Uint64N(uint64(w.Keys))] = true
	}
	keys := make([]uint64, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	read := slices.Clone(keys)
	for w2 := range cl.Layout().Workers {
		read = append(read, w.HotKey(w2))
	}
	slices.Sort(read)
	read = slices.Compact(read)

	clock := cl.Clock()
	n.Status("rank %d: pass %d partition %d minibatch %d: reading at clock %d", rank, pass, part, off, clock)
	vals := make([]float32, len(read))
	if err := tb.Pull(read, vals).Wait(ctx); err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	c.book.Read(Read{Rank: rank, Clock: clock, Staleness: w.staleness(), Keys: read, Values: vals, Finished: c.Layout().Finished})
	n.Status("rank %d: pass %d partition %d minibatch %d: computing at clock %d", rank, pass, part, off, clock)
	if !n.Compute(ctx, ms(r, 2, 25)) {
		return ctx.Err()
	}

	n.Status("rank %d: pass %d partition %d minibatch %d: pushing at clock %d", rank, pass, part, off, clock)
	p := c.book.Pushing(rank, keys)
	ones := make([]float32, len(keys))
	for i := range ones {
		ones[i] = 1
	}
	if err := tb.Push(keys, ones).Wait(ctx); err != nil {
		return fmt.Errorf("push: %w", err)
	}
	c.book.Ack(p)
	c.book.Tick(rank, clock+1)
	cl.Tick()
	return nil
}

// trained is a partition's worker state: how many times each row was
// trained, by the account of the state that moves with the partition. A
// piece's state holds its own rows; the others are notHeld.
type trained struct{ rows []uint8 }

// notHeld marks a row of another piece in a piece's state.
const notHeld = 0xff

// Split moves rows out into a state of their own (ps.SplittableState).
func (t *trained) Split(rows []int) (ps.PartitionState, error) {
	tail := &trained{rows: slices.Repeat([]uint8{notHeld}, len(t.rows))}
	for _, r := range rows {
		if r < 0 || r >= len(t.rows) || t.rows[r] == notHeld {
			return nil, fmt.Errorf("row %d is not this piece's", r)
		}
		tail.rows[r], t.rows[r] = t.rows[r], notHeld
	}
	return tail, nil
}

// Join takes in another piece's rows.
func (t *trained) Join(other ps.PartitionState) error {
	o, ok := other.(*trained)
	if !ok || len(o.rows) != len(t.rows) {
		return fmt.Errorf("joining a partition state of another kind")
	}
	for r, n := range o.rows {
		if n == notHeld {
			continue
		}
		if t.rows[r] != notHeld {
			return fmt.Errorf("row %d is in two pieces", r)
		}
		t.rows[r] = n
	}
	return nil
}

func (t *trained) MarshalBinary() ([]byte, error) { return slices.Clone(t.rows), nil }

func (t *trained) UnmarshalBinary(b []byte) error {
	if len(b) != len(t.rows) {
		return fmt.Errorf("partition state of %d bytes, want %d", len(b), len(t.rows))
	}
	copy(t.rows, b)
	return nil
}
