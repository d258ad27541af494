package coord

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
)

// Data partitions are leased to workers epoch by epoch (Litz's
// over-decomposition): a worker asks for work, trains a partition from the
// offset recorded for it, reports progress, and completes it. A worker that
// stops heartbeating loses its leases, and the partitions go back to the
// pool at their last reported offset, so another worker trains the rest.
// When every partition of an epoch is complete, asking for work answers
// "epoch done" to everyone: that is the epoch barrier, and it waits for no
// dead worker.

// DefaultFailureTimeout is how long a node may stay silent before the
// coordinator declares it dead (Options.FailureTimeout): a worker's leases
// are then taken back and its clock stops holding the others; a server
// leaves the ring.
const DefaultFailureTimeout = layout.DefaultFailureTimeout

// failureTimeout is Options.FailureTimeout, or its default.
func (c *Coordinator) failureTimeout() time.Duration {
	if c.opts.FailureTimeout > 0 {
		return c.opts.FailureTimeout
	}
	return DefaultFailureTimeout
}

// Grant answers a request for work.
type Grant struct {
	// Partition and Offset say what to train: rows Offset.. of the
	// partition. Partition is -1 when the epoch is done.
	Partition int `json:"partition"`
	Offset    int `json:"offset"`
	// State is the version of the partition's worker state as of Offset
	// (0: none yet); fetch it with State.
	State uint64 `json:"state,omitempty"`
	// Lease names this grant; reports on the partition carry it.
	Lease uint64 `json:"lease,omitempty"`
	// Done is set when every partition of the epoch is complete.
	Done bool `json:"done"`
	// Clock, with Done, is the highest clock any worker reported: workers
	// advance to it so that none holds the others back next epoch.
	Clock int64 `json:"clock"`
}

type lease struct {
	rank   int // -1 when free
	offset int
	done   bool
	// grant numbers the lease's current grant: a report names it, so that
	// one sent under an earlier grant of the same partition to the same
	// rank (a worker restarted under its old ID) is refused.
	grant uint64
}

type epochWork struct {
	parts []lease
	left  int // partitions not yet complete
}

func (c *Coordinator) epochLocked(e int) *epochWork {
	if e < c.doneBefore {
		// Complete and forgotten (retireEpochsLocked).
		w := &epochWork{parts: make([]lease, c.lay.Partitions)}
		for i := range w.parts {
			w.parts[i] = lease{rank: -1, done: true}
		}
		return w
	}
	if c.work == nil {
		c.work = map[int]*epochWork{}
	}
	w := c.work[e]
	if w == nil {
		w = &epochWork{parts: make([]lease, c.lay.Partitions), left: c.lay.Partitions}
		for i := range w.parts {
			w.parts[i].rank = -1
		}
		c.work[e] = w
	}
	return w
}

// Acquire leases a partition of epoch e to worker rank, preferring the
// partitions that are rank's by default (p mod workers), so that data stays
// where it was while nothing fails, then any free one; it waits while every
// remaining partition is leased to a live worker.
func (c *Coordinator) Acquire(ctx context.Context, rank, e int) (Grant, error) {
	for {
		c.mu.Lock()
		if err := c.checkRankLocked(rank); err != nil {
			c.mu.Unlock()
			return Grant{}, err
		}
		c.beatLocked(rank)
		if ck := c.lay.Checkpoint; ck != nil && e >= ck.Epoch {
			// The epoch's end (its barrier) and the next epoch wait until
			// the checkpoint is committed, so that a run that ends right
			// after it does not cut it short.
			ch := c.changed
			c.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return Grant{}, ctx.Err()
			}
		}
		w := c.epochLocked(e)
		if w.left == 0 {
			g := Grant{Partition: -1, Done: true, Clock: c.maxClock}
			c.mu.Unlock()
			return g, nil
		}
		// A worker asks for work only when it has none, so a partition
		// still leased to it is one whose grant it never received (the
		// coordinator that granted it failed before answering): grant it
		// again, from its offset, under a new grant number.
		pick := slices.IndexFunc(w.parts, func(l lease) bool { return !l.done && l.rank == rank })
		if pick < 0 {
			pick = c.freePartitionLocked(w, rank)
		}
		if pick >= 0 {
			c.grants++
			l := &w.parts[pick]
			l.rank, l.grant = rank, c.grants
			g := Grant{Partition: pick, Offset: l.offset, State: c.stateVer[pick], Lease: l.grant}
			err := c.persistLocked()
			c.mu.Unlock()
			return g, err
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(c.failureTimeout() / 4):
			c.expireWorkers()
		case <-ctx.Done():
			return Grant{}, ctx.Err()
		}
	}
}

// freePartitionLocked picks a free partition for rank, its own (p mod
// workers) first; -1 if none is free.
func (c *Coordinator) freePartitionLocked(w *epochWork, rank int) int {
	pick := -1
	for p, l := range w.parts {
		if l.done || l.rank >= 0 {
			continue
		}
		if p%max(1, c.lay.Workers) == rank%max(1, c.lay.Workers) {
			return p
		}
		if pick < 0 {
			pick = p
		}
	}
	return pick
}

// Progress records that u.Rank has trained partition u.Partition of epoch
// u.Epoch up to u.Offset, with its pushes acknowledged, and that its clock
// is u.Clock; with u.HasState, u.State becomes the partition's state. It
// returns the partition's state version after the update (0 if it has
// none).
func (c *Coordinator) Progress(ctx context.Context, u Update) (uint64, error) {
	var ver uint64
	if u.HasState {
		v, err := c.putState(ctx, u)
		if err != nil {
			return 0, err
		}
		ver = v
	}
	c.mu.Lock()
	l, err := c.leaseLocked(u)
	if err != nil || l.done {
		c.mu.Unlock()
		c.dropState(u.Partition, ver)
		return 0, err
	}
	c.maxClock = max(c.maxClock, u.Clock)
	drop := ver
	if u.HasState && u.Offset >= l.offset {
		// A report that lost a race with a later one keeps neither its
		// offset nor its state.
		drop, c.stateVer[u.Partition] = c.stateVer[u.Partition], ver
	}
	l.offset = max(l.offset, u.Offset)
	if u.Complete {
		l.done, l.rank = true, -1
		w := c.work[u.Epoch]
		w.left--
		if w.left == 0 {
			c.retireEpochsLocked()
			c.startCheckpointLocked(u.Epoch)
			c.publish()
		}
	}
	cur := c.stateVer[u.Partition]
	err = c.persistLocked()
	c.mu.Unlock()
	if err != nil {
		// Not saved: the version stays unnamed, and the next leader sweeps it.
		return 0, err
	}
	c.dropState(u.Partition, drop)
	return cur, nil
}

// retireEpochsLocked forgets the leases of complete epochs, keeping only
// the first epoch not complete (doneBefore): the saved state would
// otherwise grow with every epoch, and is rewritten on every change.
func (c *Coordinator) retireEpochsLocked() {
	for w := c.work[c.doneBefore]; w != nil && w.left == 0; w = c.work[c.doneBefore] {
		delete(c.work, c.doneBefore)
		c.doneBefore++
	}
}

// leaseLocked returns the lease u reports on, or an error if u.Rank does
// not hold it; a lease already complete is returned without error.
func (c *Coordinator) leaseLocked(u Update) (*lease, error) {
	if err := c.checkRankLocked(u.Rank); err != nil {
		return nil, err
	}
	c.beatLocked(u.Rank)
	w := c.epochLocked(u.Epoch)
	if u.Partition < 0 || u.Partition >= len(w.parts) {
		return nil, fmt.Errorf("%w: partition %d of %d", errBadRequest, u.Partition, len(w.parts))
	}
	l := &w.parts[u.Partition]
	if !l.done && (l.rank != u.Rank || u.Lease != 0 && u.Lease != l.grant) {
		return nil, fmt.Errorf("%w: partition %d of epoch %d is not leased to rank %d under grant %d", ErrLeaseLost, u.Partition, u.Epoch, u.Rank, u.Lease)
	}
	return l, nil
}

// Heartbeat keeps rank's leases alive.
func (c *Coordinator) Heartbeat(rank int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkRankLocked(rank); err != nil {
		return err
	}
	c.beatLocked(rank)
	return nil
}

// deafFor excuses every worker for d in which the coordinator could not
// hear heartbeats, because it held c.mu through a save to etcd: a save
// waits out an etcd leader election (seconds), and the heartbeats that
// queued meanwhile must not lose the race for c.mu to expireWorkers.
// c.mu is held.
func (c *Coordinator) deafFor(d time.Duration) {
	now := time.Now()
	for r, t := range c.beats {
		if t = t.Add(d); t.After(now) {
			t = now
		}
		c.beats[r] = t
	}
}

func (c *Coordinator) beatLocked(rank int) {
	if c.beats == nil {
		c.beats = map[int]time.Time{}
	}
	c.beats[rank] = time.Now()
}

func (c *Coordinator) checkRankLocked(rank int) error {
	if rank < 0 || rank >= c.lay.Workers {
		return fmt.Errorf("%w: rank %d of %d", errBadRequest, rank, c.lay.Workers)
	}
	if c.finishedLocked(rank) {
		return fmt.Errorf("%w: rank %d was declared dead", ErrLeaseLost, rank)
	}
	return nil
}

// expireWorkers declares dead every worker silent for the failure timeout: its
// leases return to the pool at their last offsets, and the layout lists its
// rank as finished, so that servers stop waiting for its clock.
func (c *Coordinator) expireWorkers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	changed := false
	for rank, t := range c.beats {
		if now.Sub(t) < c.failureTimeout() || c.finishedLocked(rank) {
			continue
		}
		c.log.Warn("worker silent; its leases return to the pool", "rank", rank, "silent", now.Sub(t).Round(time.Millisecond))
		c.finishLocked(rank)
		changed = true
	}
	if changed {
		c.publish()
	}
}

func (c *Coordinator) finishedLocked(rank int) bool {
	return slices.Contains(c.lay.Finished, rank)
}

// finishLocked lists rank as finished and returns its leases to the pool.
func (c *Coordinator) finishLocked(rank int) {
	c.lay.Finished = append(c.lay.Finished, rank)
	for _, w := range c.work {
		for i := range w.parts {
			if w.parts[i].rank == rank {
				w.parts[i].rank = -1
			}
		}
	}
}

// ReleaseWorker ends rank's membership at once (a drained departure): its
// leases return to the pool and its clock stops counting.
func (c *Coordinator) ReleaseWorker(rank int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finishedLocked(rank) {
		return
	}
	c.finishLocked(rank)
	c.publish()
}

// WatchWorkers expires silent workers until ctx ends.
func (c *Coordinator) WatchWorkers(ctx context.Context) {
	t := time.NewTicker(c.failureTimeout() / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.expireWorkers()
		}
	}
}
