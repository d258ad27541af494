package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/table"
)

// Errors callers can test with errors.Is.
var (
	ErrFull          = errors.New("coord: cluster already has every node it expects")
	ErrTableConflict = errors.New("coord: a different table of that name exists")
	// ErrLeaseLost: the worker no longer holds the partition (it was
	// declared dead, and another worker may be training it).
	ErrLeaseLost = errors.New("coord: lease lost")
)

// Options configure a Coordinator.
type Options struct {
	// Servers and Workers are how many nodes of each role the layout waits
	// for before it is ready.
	Servers, Workers int
	// Partitions is the number of data partitions (4 per worker if 0).
	Partitions int
	VNodes     int
	// Replication is how many servers hold each slot (k).
	Replication int
	// CheckpointDir, with CheckpointEvery > 0, takes a cluster checkpoint
	// there after every CheckpointEvery epochs.
	CheckpointDir   string
	CheckpointEvery int
	// Resume starts from the newest committed checkpoint in CheckpointDir.
	Resume bool
	Logger *slog.Logger
	// Network makes the failure detector's connections to servers (TCP if nil).
	Network transport.Network
	// Membership, when set, is published in the layout: nodes register
	// there, and MemberGone hears of their leases' expiry.
	Membership *layout.Membership
	// FailureTimeout is how long a node may stay silent (no heartbeat, no
	// answer to pings) before it is declared dead (DefaultFailureTimeout
	// if 0). Workers heartbeat five times per timeout.
	FailureTimeout time.Duration
}

// Coordinator holds the cluster's layout.
type Coordinator struct {
	opts Options

	mu      sync.Mutex
	lay     layout.Layout
	changed chan struct{} // closed and replaced at every change
	workers map[string]int
	reports map[int]json.RawMessage
	done    chan struct{}
	removed int // servers removed after failures: they no longer count towards readiness

	work map[int]*epochWork // by epoch, from doneBefore on
	// doneBefore: every epoch below it is complete.
	doneBefore int
	grants     uint64            // the last lease grant number
	beats      map[int]time.Time // last heartbeat by rank
	maxClock   int64
	synced     map[string]map[string]bool // joiner -> ring servers that shipped it its copies
	// syncFrom is the first layout version whose synced reports count: any
	// change of the ring or of the joiners changes what each head must ship.
	syncFrom uint64

	// stateVer is the current state version of each partition with state
	// (see state.go), nextStateVer the last version handed out.
	stateVer     map[int]uint64
	nextStateVer uint64
	states       StateStore

	persist    Persist
	persistErr error
	// newEpoch: the layout about to be published begins an epoch, which
	// persistLocked numbers.
	newEpoch bool
	// incarnations: the incarnation each node joined with, by "role/id".
	incarnations map[string]string

	log           *slog.Logger
	ckptSeq       uint64
	ckptReported  map[string]bool
	ckptStart     time.Time
	ckptDone      []CheckpointStat
	ckptRequested bool
	restored      map[string]bool
}

// New returns a coordinator waiting for its nodes; with o.Resume it starts
// from the newest committed checkpoint (Open reports a failure to load it).
func New(o Options) *Coordinator {
	c, err := Open(o)
	if err != nil {
		panic(err) // only Resume can fail, and callers that resume use Open
	}
	return c
}

// Open is New, returning an error when o.Resume finds no usable checkpoint.
func Open(o Options) (*Coordinator, error) {
	if o.Partitions <= 0 {
		o.Partitions = 4 * max(o.Workers, 1)
	}
	c := &Coordinator{
		opts: o,
		lay: layout.Layout{Version: 1, VNodes: o.VNodes, Workers: o.Workers, Partitions: o.Partitions, Replication: max(1, o.Replication),
			Membership: o.Membership, FailureTimeoutMillis: o.FailureTimeout.Milliseconds()},
		changed: make(chan struct{}),
		workers: map[string]int{},
		reports: map[int]json.RawMessage{},
		done:    make(chan struct{}),
		synced:  map[string]map[string]bool{},
		log:     o.Logger,

		stateVer:     map[int]uint64{},
		states:       &memStates{},
		incarnations: map[string]string{},
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if o.Resume {
		if err := c.resumeLocked(o.CheckpointDir); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// publish bumps the version and wakes long-pollers; c.mu is held.
func (c *Coordinator) publish() {
	c.lay.Version++
	c.lay.Ready = c.lay.Ready || len(c.lay.Servers)+c.removed >= c.opts.Servers && len(c.workers) >= c.opts.Workers && c.lay.Resume == nil
	// Saved before anyone can see it, so a successor never publishes an
	// older version than a client has seen. A version that could not be
	// saved is shown to no one (see Layout): this coordinator answers
	// nothing more, and its successor goes on from the last saved state.
	// Pollers wake either way: they see the layout, or ErrNotPersisted.
	c.persistLocked()
	close(c.changed)
	c.changed = make(chan struct{})
}

// newEpochLocked starts a new epoch in the layout about to be published:
// the placement of keys changes. The epoch gets its final number when it
// is saved (persistLocked); until then it is the next count.
func (c *Coordinator) newEpochLocked() {
	if !c.newEpoch {
		c.lay.PrevEpoch = c.lay.Epoch
	}
	c.lay.Epoch = c.lay.PrevEpoch + 1
	c.newEpoch = true
}

func (c *Coordinator) snapshot() *layout.Layout {
	l := c.lay
	l.Servers = slices.Clone(l.Servers)
	l.Tables = slices.Clone(l.Tables)
	return &l
}

// Layout returns the first layout whose version is above after, waiting
// for one until ctx ends. A coordinator that could not save its state
// returns ErrNotPersisted: its layout may be one its successor never saw.
func (c *Coordinator) Layout(ctx context.Context, after uint64) (*layout.Layout, error) {
	for {
		c.mu.Lock()
		if err := c.persistErr; err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if c.lay.Version > after {
			l := c.snapshot()
			c.mu.Unlock()
			return l, nil
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// JoinServer admits a server, or updates the address of a known one.
func (c *Coordinator) JoinServer(id, addr string) (*layout.Layout, error) {
	return c.JoinServerAs(id, addr, "")
}

// JoinServerAs is JoinServer for a server process that registers in etcd
// as incarnation inc (see MemberGone).
func (c *Coordinator) JoinServerAs(id, addr, inc string) (*layout.Layout, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := c.incarnateLocked(RoleServer, id, inc)
	for i, s := range c.lay.Servers {
		if s.ID == id {
			if s.Addr != addr {
				c.lay.Servers[i].Addr = addr
				c.newEpochLocked()
				c.resetSyncLocked()
				c.publish()
			} else if fresh {
				c.persistLocked()
			}
			return c.snapshot(), nil
		}
	}
	for i, s := range c.lay.Joining {
		if s.ID == id {
			c.lay.Joining[i].Addr = addr
			c.resetSyncLocked() // a restarted joiner holds nothing
			c.publish()
			return c.snapshot(), nil
		}
	}
	if c.lay.Ready || len(c.lay.Servers) >= c.opts.Servers {
		// A running cluster takes a new server in two phases: first it
		// joins the chains of the slots it will hold, and the heads ship it
		// full copies and every later push; once every head reports it
		// caught up (Synced), it goes on the ring with a new epoch.
		c.lay.Joining = append(slices.Clone(c.lay.Joining), ring.Server{ID: id, Addr: addr})
		if _, err := c.lay.Final(); err != nil {
			c.lay.Joining = c.lay.Joining[:len(c.lay.Joining)-1]
			return nil, err
		}
		c.synced[id] = map[string]bool{}
		c.resetSyncLocked()
		c.publish()
		return c.snapshot(), nil
	}
	servers := append(slices.Clone(c.lay.Servers), ring.Server{ID: id, Addr: addr})
	if _, err := ring.New(c.lay.Epoch+1, servers, c.opts.VNodes); err != nil {
		return nil, err
	}
	c.lay.Servers = servers
	c.newEpochLocked()
	c.resetSyncLocked()
	c.publish()
	return c.snapshot(), nil
}

// RemoveServer takes a failed or departed server out of the layout: its
// slots fall to the next servers of their chains, which hold copies when
// the replication factor is above 1.
func (c *Coordinator) RemoveServer(id, addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removeServerLocked(id, addr)
}

func (c *Coordinator) removeServerLocked(id, addr string) bool {
	match := func(s ring.Server) bool { return s.ID == id && (addr == "" || s.Addr == addr) }
	if j := slices.IndexFunc(c.lay.Joining, match); j >= 0 {
		c.lay.Joining = slices.Delete(slices.Clone(c.lay.Joining), j, j+1)
		delete(c.synced, id)
		c.resetSyncLocked()
		c.publish()
		return true
	}
	i := slices.IndexFunc(c.lay.Servers, match)
	if i < 0 || len(c.lay.Servers) == 1 {
		return false
	}
	c.lay.Servers = slices.Delete(slices.Clone(c.lay.Servers), i, i+1)
	c.lay.Leaving = slices.DeleteFunc(slices.Clone(c.lay.Leaving), func(l string) bool { return l == id })
	delete(c.synced, id)
	c.newEpochLocked()
	c.removed++
	// Joiners are not promoted here even if every remaining server synced
	// them: the slots the departed server headed have new heads, which
	// must ship them first (a pre-copy cut short by the failure lost them).
	c.resetSyncLocked()
	c.publish()
	return true
}

// LeaveServer starts a drained departure: server id stays on the ring while
// every head ships the slots it will no longer hold to their new holders,
// and leaves the ring once all have (see promoteLocked). It reports false if
// id is not on the ring or is the last server.
func (c *Coordinator) LeaveServer(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.ContainsFunc(c.lay.Servers, func(s ring.Server) bool { return s.ID == id }) || len(c.lay.Servers)-len(c.lay.Leaving) <= 1 {
		return false
	}
	if slices.Contains(c.lay.Leaving, id) {
		return true
	}
	c.lay.Leaving = append(slices.Clone(c.lay.Leaving), id)
	c.synced[id] = map[string]bool{}
	c.resetSyncLocked()
	c.publish()
	return true
}

// resetSyncLocked forgets every joiner's synced reports: the ring or the
// joiners are changing in the version about to be published, and so is
// what each head must ship. Heads report again after their rebuild for it.
func (c *Coordinator) resetSyncLocked() {
	for j := range c.synced {
		c.synced[j] = map[string]bool{}
	}
	c.syncFrom = c.lay.Version + 1
}

// Synced records that server from has shipped full copies of its slots
// to the servers that hold them once joiner (a joining or a leaving
// server) has moved, under layout version; once every server on the ring
// has, joiner goes on the ring, or off it.
func (c *Coordinator) Synced(from, joiner string, version uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.synced[joiner]
	if got == nil || version < c.syncFrom {
		return
	}
	got[from] = true
	if c.promoteLocked() {
		c.publish()
	}
}

// promoteLocked moves every joiner that all ring servers have synced onto
// the ring, and takes every leaving server that all have synced off it, in
// one new epoch.
func (c *Coordinator) promoteLocked() bool {
	done := func(id string) bool {
		for _, s := range c.lay.Servers {
			if !c.synced[id][s.ID] {
				return false
			}
		}
		return true
	}
	var stay []ring.Server
	changed := false
	for _, j := range c.lay.Joining {
		if done(j.ID) {
			c.lay.Servers = append(slices.Clone(c.lay.Servers), j)
			delete(c.synced, j.ID)
			changed = true
			continue
		}
		stay = append(stay, j)
	}
	var staying []string
	for _, id := range c.lay.Leaving {
		if done(id) {
			c.lay.Servers = slices.DeleteFunc(slices.Clone(c.lay.Servers), func(s ring.Server) bool { return s.ID == id })
			delete(c.synced, id)
			c.removed++
			changed = true
			continue
		}
		staying = append(staying, id)
	}
	if changed {
		c.lay.Joining, c.lay.Leaving = stay, staying
		c.newEpochLocked()
		c.resetSyncLocked()
	}
	return changed
}

// JoinWorker admits a worker and returns its rank; a worker that joins
// again under the same ID gets the same rank.
func (c *Coordinator) JoinWorker(id string) (int, error) {
	return c.JoinWorkerAs(id, "")
}

// JoinWorkerAs is JoinWorker for a worker process that registers in etcd
// as incarnation inc (see MemberGone).
func (c *Coordinator) JoinWorkerAs(id, inc string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := c.incarnateLocked(RoleWorker, id, inc)
	if r, ok := c.workers[id]; ok {
		if fresh {
			c.persistLocked()
		}
		return r, nil
	}
	if len(c.workers) >= c.opts.Workers && !c.lay.Ready {
		return 0, fmt.Errorf("%w: worker %s would be number %d of %d", ErrFull, id, len(c.workers)+1, c.opts.Workers)
	}
	// A worker joining a running cluster takes a new rank; it leases
	// partitions like the others from its first request for work.
	r := len(c.workers)
	c.workers[id] = r
	if r >= c.lay.Workers {
		c.lay.Workers = r + 1
	}
	c.publish()
	return r, nil
}

// incarnateLocked records that node role/id is now incarnation inc, and
// reports whether that is new: the next save carries it, and a join that
// publishes nothing must save it itself.
func (c *Coordinator) incarnateLocked(role, id, inc string) bool {
	key := role + "/" + id
	if inc == "" || c.incarnations[key] == inc {
		return false
	}
	c.incarnations[key] = inc
	return true
}

// Roles of the nodes, as they join and register.
const (
	RoleServer = "server"
	RoleWorker = "worker"
)

// CreateTable adds a table, or checks that an identical one exists.
func (c *Coordinator) CreateTable(_ context.Context, spec table.Spec) (*layout.Layout, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.lay.Table(spec.Name); ok {
		if t.Spec != spec {
			return nil, fmt.Errorf("%w: %q is %+v, not %+v", ErrTableConflict, spec.Name, t.Spec, spec)
		}
		return c.snapshot(), nil
	}
	c.lay.Tables = append(c.lay.Tables, layout.Table{ID: uint32(len(c.lay.Tables) + 1), Spec: spec})
	c.publish()
	return c.snapshot(), nil
}

// Report records worker rank's final report; once every worker has
// reported, Done is closed.
func (c *Coordinator) Report(rank int, report json.RawMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rank < 0 || rank >= c.lay.Workers {
		return fmt.Errorf("coord: report from rank %d of %d", rank, c.lay.Workers)
	}
	c.reports[rank] = slices.Clone(report)
	if err := c.persistLocked(); err != nil {
		return err
	}
	if c.allAccountedLocked() {
		select {
		case <-c.done:
		default:
			close(c.done)
		}
	}
	return nil
}

// allAccountedLocked reports whether every rank has reported or is gone.
func (c *Coordinator) allAccountedLocked() bool {
	for r := range c.lay.Workers {
		if _, ok := c.reports[r]; !ok && !c.finishedLocked(r) {
			return false
		}
	}
	return true
}

// Reports returns the reports received, by rank.
func (c *Coordinator) Reports() map[int]json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]json.RawMessage, len(c.reports))
	for k, v := range c.reports {
		out[k] = v
	}
	return out
}

// Done is closed when every worker has reported.
func (c *Coordinator) Done() <-chan struct{} { return c.done }
