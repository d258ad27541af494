package coord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"
)

// Per-partition worker state (docs/design/partstate.md): a worker may keep
// state for a data partition besides the model (an LDA model's topic
// assignments). It reports the state with its progress, as of the offset
// it reports, and whoever trains the partition next gets it back with the
// grant, so that state and offset move together. Each report makes a new
// version; the partition's current version is in the coordinator's saved
// state, and the blobs themselves in a StateStore (etcd under coordha,
// memory otherwise), written before the version that names them is saved.

// MaxStateBytes bounds one partition's state blob.
const MaxStateBytes = 16 << 20

// ErrStateTooLarge is returned for a state blob over MaxStateBytes.
var ErrStateTooLarge = errors.New("coord: partition state too large")

// ErrNoState is returned for a state version the store does not hold.
var ErrNoState = errors.New("coord: no such partition state")

// StateStore keeps partition state blobs by partition and version.
type StateStore interface {
	PutState(ctx context.Context, p int, ver uint64, blob []byte) error
	// GetState returns the blob, or an error wrapping ErrNoState.
	GetState(ctx context.Context, p int, ver uint64) ([]byte, error)
	// DeleteState forgets a version no longer current.
	DeleteState(ctx context.Context, p int, ver uint64) error
}

// Update is a worker's report on a leased partition.
type Update struct {
	Rank      int   `json:"rank"`
	Epoch     int   `json:"epoch"`
	Partition int   `json:"partition"`
	Offset    int   `json:"offset"`
	Clock     int64 `json:"clock"`
	Complete  bool  `json:"complete,omitempty"`
	// Lease is the grant reported on (Grant.Lease; 0 checks the rank only).
	Lease uint64 `json:"lease,omitempty"`
	// State, when HasState is set, is the partition's worker state as of
	// Offset (possibly empty).
	State    []byte `json:"state,omitempty"`
	HasState bool   `json:"has_state,omitempty"`
}

// memStates is the StateStore of a coordinator that keeps no state on disk.
type memStates struct {
	mu sync.Mutex
	m  map[[2]uint64][]byte
}

func (s *memStates) PutState(_ context.Context, p int, ver uint64, blob []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[[2]uint64][]byte{}
	}
	s.m[[2]uint64{uint64(p), ver}] = blob
	return nil
}

func (s *memStates) GetState(_ context.Context, p int, ver uint64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[[2]uint64{uint64(p), ver}]
	if !ok {
		return nil, fmt.Errorf("%w: partition %d version %d", ErrNoState, p, ver)
	}
	return b, nil
}

func (s *memStates) DeleteState(_ context.Context, p int, ver uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, [2]uint64{uint64(p), ver})
	return nil
}

// SetStateStore makes the coordinator keep partition state in st, before
// it serves (the default keeps it in memory). Current versions the old
// store holds (loaded from a checkpoint by Open) are copied into st.
func (c *Coordinator) SetStateStore(ctx context.Context, st StateStore) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, ver := range c.stateVer {
		blob, err := c.states.GetState(ctx, p, ver)
		if errors.Is(err, ErrNoState) {
			continue // st has it already (restored from st's own records)
		}
		if err == nil {
			err = st.PutState(ctx, p, ver, blob)
		}
		if err != nil {
			return fmt.Errorf("coord: moving partition %d state: %w", p, err)
		}
	}
	c.states = st
	return nil
}

// StateVersions returns the current state version of every partition that
// has one: what a new leader keeps when it sweeps its store.
func (c *Coordinator) StateVersions() map[int]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.stateVer)
}

// State returns version ver of partition p's state. Only the current
// version is served: a worker asking for an older one was granted the
// partition, then declared dead while the next holder trained it on
// (ErrLeaseLost).
func (c *Coordinator) State(ctx context.Context, p int, ver uint64) ([]byte, error) {
	c.mu.Lock()
	st, cur := c.states, c.stateVer[p]
	c.mu.Unlock()
	if ver != cur {
		return nil, fmt.Errorf("%w: partition %d's state is at version %d, not %d", ErrLeaseLost, p, cur, ver)
	}
	return st.GetState(ctx, p, ver)
}

// putState stores u's state under a new version while u.Rank holds the
// partition, and returns the version. c.mu is not held during the write:
// it may take a while, and heartbeats and grants go on meanwhile. Versions
// only grow within a term; a successor may hand out a number again, but
// only one whose blob was never saved as current, and a store overwrites.
func (c *Coordinator) putState(ctx context.Context, u Update) (uint64, error) {
	if len(u.State) > MaxStateBytes {
		return 0, fmt.Errorf("%w: partition %d: %d bytes, at most %d", ErrStateTooLarge, u.Partition, len(u.State), MaxStateBytes)
	}
	c.mu.Lock()
	if l, err := c.leaseLocked(u); err != nil || l.done {
		c.mu.Unlock()
		return 0, err
	}
	c.nextStateVer++
	ver, st := c.nextStateVer, c.states
	c.mu.Unlock()
	if err := st.PutState(ctx, u.Partition, ver, u.State); err != nil {
		// The store is etcd under coordha: the client may retry on a
		// coordinator that can write.
		return 0, fmt.Errorf("%w: partition %d state: %v", ErrNotPersisted, u.Partition, err)
	}
	return ver, nil
}

// dropState deletes a version that is not (or no longer) current; a
// failure leaves garbage that the next leader's sweep removes.
func (c *Coordinator) dropState(p int, ver uint64) {
	if ver == 0 {
		return
	}
	c.mu.Lock()
	st := c.states
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.DeleteState(ctx, p, ver); err != nil {
		c.log.Warn("could not delete an old partition state", "partition", p, "version", ver, "err", err)
	}
}
