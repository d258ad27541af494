package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// StateStore keeps partition state blobs by partition and version (etcd
// under coordha, memory otherwise).
type StateStore interface {
	PutState(ctx context.Context, p int, ver uint64, blob []byte) error
	// GetState returns the blob, or an error wrapping api.ErrNoState.
	GetState(ctx context.Context, p int, ver uint64) ([]byte, error)
	// DeleteState forgets a version no longer named.
	DeleteState(ctx context.Context, p int, ver uint64) error
}

// memStates is the StateStore of a coordinator that keeps no state on disk.
type memStates struct {
	mu sync.Mutex
	m  map[StateRef][]byte
}

func (s *memStates) PutState(_ context.Context, p int, ver uint64, blob []byte) error {
	s.put(p, ver, blob)
	return nil
}

func (s *memStates) put(p int, ver uint64, blob []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[StateRef][]byte{}
	}
	s.m[StateRef{p, ver}] = blob
}

func (s *memStates) GetState(_ context.Context, p int, ver uint64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[StateRef{p, ver}]
	if !ok {
		return nil, fmt.Errorf("%w: partition %d version %d", api.ErrNoState, p, ver)
	}
	return b, nil
}

func (s *memStates) DeleteState(_ context.Context, p int, ver uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, StateRef{p, ver})
	return nil
}

// SetStateStore makes the coordinator keep partition state in st, before
// Run (the default keeps it in memory). Versions the old store holds
// (loaded from a checkpoint by Open) are copied into st.
func (c *Coordinator) SetStateStore(ctx context.Context, st StateStore) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, vers := range c.m.StateVersions() {
		for _, ver := range vers {
			blob, err := c.states.GetState(ctx, p, ver)
			if errors.Is(err, api.ErrNoState) {
				continue // st has it already (restored from st's own records)
			}
			if err == nil {
				err = st.PutState(ctx, p, ver, blob)
			}
			if err != nil {
				return fmt.Errorf("coord: moving partition %d state: %w", p, err)
			}
		}
	}
	c.states = st
	return nil
}

// StateVersions returns every state version the coordinator names, by
// partition: what a new leader keeps when it sweeps its store.
func (c *Coordinator) StateVersions() map[int][]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.StateVersions()
}

// State returns version ver of partition p's state. Only versions a piece
// or a partition names are served: a worker asking for another was
// declared dead while another trained the partition on (ErrLeaseLost).
func (c *Coordinator) State(ctx context.Context, p int, ver uint64) ([]byte, error) {
	c.mu.Lock()
	st, cur := c.states, c.m.StateCurrent(p, ver)
	c.mu.Unlock()
	if !cur {
		return nil, fmt.Errorf("%w: partition %d's state version %d is not current", api.ErrLeaseLost, p, ver)
	}
	return st.GetState(ctx, p, ver)
}

// progress stores u's state blobs under versions the machine gives out
// (outside the lock: a blob may take a while, and heartbeats and grants go
// on meanwhile), then steps the report. A blob is written before the state
// that names it is saved, so that a crash leaves an unnamed blob (which
// the next leader sweeps), never a name without a blob.
func (c *Coordinator) progress(ctx context.Context, u api.Update) (api.ProgressReply, error) {
	var head, tail uint64
	if u.HasState || u.Cut != nil && u.Cut.HasState {
		if err := checkSize(u); err != nil {
			return api.ProgressReply{}, err
		}
		c.mu.Lock()
		c.m.SetNow(time.Now())
		var err error
		head, tail, err = c.m.AllocStates(u)
		st, failed := c.states, c.failed
		c.mu.Unlock()
		if err = errors.Join(failed, err); err != nil {
			return api.ProgressReply{}, err
		}
		if err := c.putStates(ctx, st, u, head, tail); err != nil {
			return api.ProgressReply{}, err
		}
	}
	r, err := c.call(ctx, func(m *Machine, id uint64) { m.Progress(id, u, head, tail) })
	return r.Progress, err
}

func checkSize(u api.Update) error {
	n := len(u.State)
	if u.Cut != nil {
		n = max(n, len(u.Cut.State))
	}
	if n > api.MaxStateBytes {
		return fmt.Errorf("%w: partition %d: %d bytes, at most %d", api.ErrStateTooLarge, u.Partition, n, api.MaxStateBytes)
	}
	return nil
}

func (c *Coordinator) putStates(ctx context.Context, st StateStore, u api.Update, head, tail uint64) error {
	for _, b := range []struct {
		ver  uint64
		blob []byte
	}{{head, u.State}, {tail, cutState(u.Cut)}} {
		if b.ver == 0 {
			continue
		}
		if err := st.PutState(ctx, u.Partition, b.ver, b.blob); err != nil {
			// The store is etcd under coordha: the client may retry on a
			// coordinator that can write.
			return fmt.Errorf("%w: partition %d state: %v", api.ErrNotPersisted, u.Partition, err)
		}
	}
	return nil
}

func cutState(c *api.Cut) []byte {
	if c == nil {
		return nil
	}
	return c.State
}

// dropStates deletes versions nothing names; a failure leaves garbage
// that the next leader's sweep removes.
func (c *Coordinator) dropStates(ctx context.Context, refs []StateRef) {
	c.mu.Lock()
	st := c.states
	c.mu.Unlock()
	for _, r := range refs {
		dctx, cancel := context.WithTimeout(ctx, saveTimeout)
		err := st.DeleteState(dctx, r.Partition, r.Version)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.log.Warn("could not delete an old partition state", "partition", r.Partition, "version", r.Version, "err", err)
		}
	}
}
