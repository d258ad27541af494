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

// attach gives l its partition's state as of version ver (0: none saved).
func (s *partStates) attach(ctx context.Context, ctl Control, l *Lease, ver uint64) error {
	s.mu.Lock()
	fresh := s.fresh
	h := s.held[l.Partition]
	if h != nil && h.clean && h.ver == ver {
		h.clean = false
		l.state = h
	}
	s.mu.Unlock()
	if fresh == nil || l.state != nil {
		return nil
	}
	h = &heldState{st: fresh(l.Partition), ver: ver}
	if ver != 0 {
		blob, err := ctl.State(ctx, l.Partition, ver)
		if err != nil {
			return fmt.Errorf("ps: fetching partition %d state (version %d): %w", l.Partition, ver, err)
		}
		if err := h.st.UnmarshalBinary(blob); err != nil {
			return fmt.Errorf("ps: restoring partition %d state (version %d): %w", l.Partition, ver, err)
		}
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

// saved records that l's state was saved as version ver.
func (s *partStates) saved(l *Lease, ver uint64, complete bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.state.ver = ver
	l.state.clean = complete && ver != 0
}
