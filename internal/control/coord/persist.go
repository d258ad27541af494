package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
)

// ErrNotPersisted is returned for changes the coordinator could not save:
// it has lost the right to act (another replica leads now), and clients
// must go to the new leader.
var ErrNotPersisted = errors.New("coord: state not persisted")

// state is what a coordinator saves after every change, and what a
// standby restores when it takes over. Heartbeat times are not saved: a
// new leader gives every worker a fresh timeout.
type state struct {
	Layout   layout.Layout              `json:"layout"`
	Workers  map[string]int             `json:"workers"`
	Reports  map[int]json.RawMessage    `json:"reports,omitempty"`
	Work     map[int][]savedLease       `json:"work,omitempty"`
	MaxClock int64                      `json:"max_clock"`
	Removed  int                        `json:"removed"`
	Synced   map[string]map[string]bool `json:"synced,omitempty"`
	SyncFrom uint64                     `json:"sync_from,omitempty"`
	// StateVer is the current state version by partition.
	StateVer     map[int]uint64 `json:"state_versions,omitempty"`
	NextStateVer uint64         `json:"next_state_version,omitempty"`
	Grants       uint64         `json:"grants,omitempty"`
	DoneBefore   int            `json:"done_before,omitempty"`
	// Incarnations: the incarnation each node joined with, by
	// "role/id" (see MemberGone).
	Incarnations map[string]string `json:"incarnations,omitempty"`
}

type savedLease struct {
	Rank   int    `json:"rank"`
	Offset int    `json:"offset"`
	Done   bool   `json:"done"`
	Grant  uint64 `json:"grant,omitempty"`
}

// Persist saves the coordinator's state (blob). placement is set when the
// save begins a new epoch: it is the layout about to be published, and
// Persist returns the number the epoch gets, the revision of its write in
// etcd (or 0 to keep the coordinator's own count). That number must
// exceed every epoch saved before.
type Persist func(ctx context.Context, blob []byte, placement *layout.Layout) (epoch uint64, err error)

// SetPersist makes the coordinator save its state with save after every
// change, before it answers; a failed save makes it refuse further changes.
func (c *Coordinator) SetPersist(save Persist) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.persist = save
}

// persistLocked saves the state; c.mu is held.
func (c *Coordinator) persistLocked() error {
	if c.persist == nil {
		c.newEpoch = false
		return nil
	}
	if c.persistErr != nil {
		return c.persistErr
	}
	st := state{
		Layout: c.lay, Workers: c.workers, Reports: c.reports, MaxClock: c.maxClock,
		Removed: c.removed, Synced: c.synced, SyncFrom: c.syncFrom, Work: map[int][]savedLease{},
		StateVer: c.stateVer, NextStateVer: c.nextStateVer, Grants: c.grants, DoneBefore: c.doneBefore,
		Incarnations: c.incarnations,
	}
	for e, w := range c.work {
		ls := make([]savedLease, len(w.parts))
		for i, l := range w.parts {
			ls[i] = savedLease{l.rank, l.offset, l.done, l.grant}
		}
		st.Work[e] = ls
	}
	blob, err := json.Marshal(st)
	if err != nil {
		return err
	}
	var placement *layout.Layout
	if c.newEpoch {
		placement = c.snapshot()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	epoch, err := c.persist(ctx, blob, placement)
	c.deafFor(time.Since(start))
	if err != nil {
		c.persistErr = fmt.Errorf("%w: %v", ErrNotPersisted, err)
		return c.persistErr
	}
	if c.newEpoch {
		c.newEpoch = false
		if epoch > 0 {
			if epoch <= c.lay.PrevEpoch {
				c.persistErr = fmt.Errorf("%w: epoch %d saved after epoch %d", ErrNotPersisted, epoch, c.lay.PrevEpoch)
				return c.persistErr
			}
			c.lay.Epoch = epoch
		}
	}
	return nil
}

// Restore replaces the coordinator's state with one a previous leader
// saved. epoch, if not 0, is the number Persist gave the last epoch saved:
// the state saved with it did not know it yet.
func (c *Coordinator) Restore(blob []byte, epoch uint64) error {
	var st state
	if err := json.Unmarshal(blob, &st); err != nil {
		return fmt.Errorf("coord: restore: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lay = st.Layout
	c.workers = st.Workers
	if c.workers == nil {
		c.workers = map[string]int{}
	}
	c.reports = st.Reports
	if c.reports == nil {
		c.reports = map[int]json.RawMessage{}
	}
	c.maxClock, c.removed = st.MaxClock, st.Removed
	c.synced, c.syncFrom = st.Synced, st.SyncFrom
	if c.synced == nil {
		c.synced = map[string]map[string]bool{}
	}
	if epoch > 0 {
		c.lay.Epoch = epoch
	}
	// Nodes register where this coordinator says: the saved layout names
	// the etcd members the previous leader saw.
	c.lay.Membership = c.opts.Membership
	c.lay.FailureTimeoutMillis = c.opts.FailureTimeout.Milliseconds()
	c.incarnations = st.Incarnations
	if c.incarnations == nil {
		c.incarnations = map[string]string{}
	}
	c.stateVer, c.nextStateVer, c.grants, c.doneBefore = st.StateVer, st.NextStateVer, st.Grants, st.DoneBefore
	if c.stateVer == nil {
		c.stateVer = map[int]uint64{}
	}
	c.work = map[int]*epochWork{}
	for e, ls := range st.Work {
		w := &epochWork{parts: make([]lease, len(ls))}
		for i, l := range ls {
			w.parts[i] = lease{rank: l.Rank, offset: l.Offset, done: l.Done, grant: l.Grant}
			if !l.Done {
				w.left++
			}
		}
		c.work[e] = w
	}
	// Leases held when the old leader went stay with their holders, who
	// keep heartbeating; a holder that died meanwhile times out as usual.
	c.beats = map[int]time.Time{}
	now := time.Now()
	for _, r := range c.workers {
		c.beats[r] = now
	}
	c.lay.Version++
	close(c.changed)
	c.changed = make(chan struct{})
	return nil
}
