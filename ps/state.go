package ps

import (
	"context"
	"encoding"
	"fmt"
	"sync"
)

// PartitionState is state a worker keeps for one data partition besides
// the model: an LDA model's topic assignments, a partition's running
// statistics. With KeepState, every progress record of the partition loop
// snapshots it (MarshalBinary) together with the offset, and whoever
// trains the partition next (this worker in the next pass, or another
// after a failure or a drain) gets it back (UnmarshalBinary into a fresh
// one), so that the state moves with its partition
// (docs/design/partstate.md).
type PartitionState interface {
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

// SplittableState is partition state that can follow the tail of a lease
// to another worker (docs/design/partloop.md): without it, a lease with
// state declines every cut. The blob of a piece's state (MarshalBinary)
// must say which rows it holds, so that the states of a partition's
// pieces, restored each into a fresh state, can be joined into the whole.
type SplittableState interface {
	PartitionState
	// Split moves the state of rows (row numbers of the partition: the
	// rows of a lease's tail, none of them trained in this pass) out of
	// the receiver into a new state, which it returns; the receiver keeps
	// the state of its other rows.
	Split(rows []int) (PartitionState, error)
	// Join takes into the receiver other, the state of another piece of
	// the same partition: each row's state comes from the piece that held
	// it.
	Join(other PartitionState) error
}

// KeepState makes every lease carry its partition's state, made by fresh
// for a partition this worker has no current copy of, and restored from
// the last snapshot if the partition has one. Call it before the first
// EachPartition.
func (c *Client) KeepState(fresh func(partition int) PartitionState) {
	c.parts.mu.Lock()
	defer c.parts.mu.Unlock()
	c.parts.fresh = fresh
}

// State returns the lease's partition state (nil without KeepState). When
// the lease starts it is as of the lease's Offset: the snapshot of the
// partition's last progress record, by whichever worker made it.
func (l *Lease) State() PartitionState {
	if l.state == nil {
		return nil
	}
	return l.state.st
}

// partStates is a worker's copy of the state of the partitions it trained.
type partStates struct {
	mu    sync.Mutex
	fresh func(partition int) PartitionState
	held  map[int]*heldState
}

type heldState struct {
	st  PartitionState
	ver uint64 // the version last saved or restored
	// clean is set when the last save was the partition's end, and
	// nothing has touched st since: only then may the next lease of the
	// partition reuse st instead of restoring it. A lease that ended any
	// other way (lease lost, drained, failed) may have moved st past what
	// was saved.
	clean bool
}

// attach gives l its piece's state, joined from versions (none: nothing
// saved yet).
func (s *partStates) attach(ctx context.Context, src Control, l *Lease, versions []uint64) error {
	s.mu.Lock()
	fresh := s.fresh
	h := s.held[l.Partition]
	if h != nil && h.clean && len(versions) == 1 && h.ver == versions[0] {
		h.clean = false
		l.state = h
	}
	s.mu.Unlock()
	if fresh == nil || l.state != nil {
		return nil
	}
	h = &heldState{st: fresh(l.Partition)}
	for i, ver := range versions {
		st := h.st
		if i > 0 {
			st = fresh(l.Partition)
		}
		blob, err := src.State(ctx, l.Partition, ver)
		if err != nil {
			return fmt.Errorf("ps: fetching partition %d state (version %d): %w", l.Partition, ver, err)
		}
		if err := st.UnmarshalBinary(blob); err != nil {
			return fmt.Errorf("ps: restoring partition %d state (version %d): %w", l.Partition, ver, err)
		}
		if i > 0 {
			if err := join(h.st, st); err != nil {
				return fmt.Errorf("ps: joining partition %d state (version %d): %w", l.Partition, ver, err)
			}
		}
	}
	if len(versions) == 1 {
		h.ver = versions[0]
	}
	s.mu.Lock()
	if s.held == nil {
		s.held = map[int]*heldState{}
	}
	s.held[l.Partition] = h
	s.mu.Unlock()
	l.state = h
	return nil
}

// join joins piece into st, which must be a SplittableState.
func join(st, piece PartitionState) error {
	sp, ok := st.(SplittableState)
	if !ok {
		return fmt.Errorf("%w: the partition's state is in pieces, and a %T cannot be joined", ErrBadArgument, st)
	}
	return sp.Join(piece)
}

// saved records that l's state was saved as version ver.
func (s *partStates) saved(l *Lease, ver uint64, complete bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.state.ver = ver
	l.state.clean = complete && ver != 0
}
