package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
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
	// Account: workers keep the examples account (Layout.Account).
	Account bool
	// CheckpointDir, with CheckpointEvery > 0, takes a cluster checkpoint
	// there after every CheckpointEvery passes.
	CheckpointDir   string
	CheckpointEvery int
	// CheckpointKeep, if > 0, removes after each commit the cluster
	// checkpoints older than the newest CheckpointKeep (0: keep every one).
	CheckpointKeep int
	// Resume starts from the newest committed checkpoint in CheckpointDir.
	Resume bool
	Logger *slog.Logger
	// Network makes the failure detector's connections to servers (TCP if nil).
	Network transport.Network
	// Membership, when set, is published in the layout: nodes register
	// there, and MemberGone hears of their registrations' end.
	Membership *layout.Membership
	// FailureTimeout is how long a node may stay silent (no heartbeat, no
	// answer to pings) before it is declared dead (DefaultFailureTimeout
	// if 0). Workers heartbeat five times per timeout.
	FailureTimeout time.Duration
	// Wrap, when set, puts a handler in front of the HTTP API (the join
	// tokens' guard, internal/control/auth); refused is where it reports
	// the requests it refuses (Coordinator.NoteRefused).
	Wrap func(h http.Handler, refused func(peer, cause string)) http.Handler
	// Stage is the stage the cluster forms in (issue 11; 0 means stage 1),
	// SyncInterval the ActivePS's sync interval (1 s if 0).
	Stage        tier.Stage
	SyncInterval time.Duration
	// StageReason: see Config.
	StageReason string
	// Prices are dollars per machine-hour by class, for the cost so far
	// in the status and the metrics; zero: not known, no cost shown.
	Prices tier.ByClass
	// ExitWhenDone: the cluster ends with its job; servers exit when it
	// does.
	ExitWhenDone bool
	// ProgressGap is the least time between a save and the next one whose
	// only change is periodic progress (Config.ProgressGap;
	// DefaultProgressGap if 0, none if negative).
	ProgressGap time.Duration
	// OnCopiesLost: Config.OnCopiesLost.
	OnCopiesLost CopiesLostPolicy
}

// DefaultProgressGap bounds periodic progress to 50 saves a second: a
// one-worker lr job saved about 130 times a second, 100 of them records
// (docs/design/control.md, "Periodic progress").
const DefaultProgressGap = 20 * time.Millisecond

func (o Options) config() Config {
	return Config{Servers: o.Servers, Workers: o.Workers, Partitions: o.Partitions, VNodes: o.VNodes, Account: o.Account,
		Replication: o.Replication, CheckpointDir: o.CheckpointDir, CheckpointEvery: o.CheckpointEvery,
		FailureTimeout: o.FailureTimeout, Membership: o.Membership, Logger: o.Logger,
		Stage: o.Stage, SyncInterval: o.SyncInterval, ExitWhenDone: o.ExitWhenDone, StageReason: o.StageReason,
		ProgressGap: o.progressGap(), OnCopiesLost: o.OnCopiesLost}
}

func (o Options) progressGap() time.Duration {
	if o.ProgressGap == 0 {
		return DefaultProgressGap
	}
	return max(o.ProgressGap, 0)
}

// Coordinator drives a Machine: requests step it under a mutex held only
// for that (no I/O under it), and one goroutine (Run) takes its Ready,
// saves the state outside the lock, then publishes the layout and sends
// the replies, and feeds back the save's outcome and the results of the
// effects (state deletions, checkpoint commits, probes). A heartbeat is
// answered at once, never behind a save.
type Coordinator struct {
	opts Options
	log  *slog.Logger
	// refused rate-limits the timeline's refusal events (NoteRefused).
	refused refusals

	mu        sync.Mutex
	m         *Machine
	published *layout.Layout // the layout of the last save
	changed   chan struct{}  // closed and replaced when published changes
	calls     map[uint64]chan Reply
	nextID    uint64
	failed    error // set once a save failed: nothing more is answered
	done      chan struct{}
	doneShut  bool
	ends      jobEnds
	persist   Persist
	states    StateStore

	kick chan struct{} // wakes Run
	wg   sync.WaitGroup
	// conns holds each open connection of the HTTP API's *beatConn, and
	// beatConns each worker rank's last heartbeat's.
	conns, beatConns sync.Map

	// The timeline and the metrics (events.go, metrics.go, status.go).
	events     *eventLog
	eventStore EventStore
	restored   bool
	// resumedLost is the event to record once the timeline is loaded: the
	// coordinator resumed from a checkpoint because every server of the
	// saved state was gone (NoteResumedLost).
	resumedLost struct{ self, msg string }
	metrics     *coordMetrics
	rate        rateSamples  // the training rate's (status.go)
	meter       clusterMeter // cost and samples over time (cluster.go)
}

// Persist saves the coordinator's state: s, as one whole that a
// successor reads with the saves before it (Saved.Apply). placement is
// set when the save begins a new epoch: it is the layout about to be
// published, and Persist returns the number the epoch gets, the revision
// of its write in etcd (or 0 to keep the coordinator's own count). That
// number must exceed every epoch saved before.
type Persist func(ctx context.Context, s *Save, placement *layout.Layout) (epoch uint64, err error)

// saveTimeout bounds one save; one that takes longer fails, and the
// coordinator stops answering (its successor goes on from the last save).
const saveTimeout = 5 * time.Second

// New returns a coordinator waiting for its nodes; it panics if o.Resume
// finds no usable checkpoint (callers that resume use Open).
func New(o Options) *Coordinator {
	c, err := Open(o)
	if err != nil {
		panic(err)
	}
	return c
}

// Open returns a coordinator waiting for its nodes; with o.Resume it
// starts from the newest committed checkpoint, and fails if there is none
// it can use. Run (or Serve) drives it.
func Open(o Options) (*Coordinator, error) {
	if o.Partitions <= 0 {
		o.Partitions = 4 * max(o.Workers, 1)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c := &Coordinator{opts: o, log: o.Logger, m: NewMachine(o.config(), time.Now()), changed: make(chan struct{}),
		calls: map[uint64]chan Reply{}, done: make(chan struct{}), states: &memStates{}, kick: make(chan struct{}, 1),
		events: newEventLog(), metrics: newCoordMetrics(), meter: clusterMeter{prices: o.Prices}}
	c.published = c.m.published
	if o.Resume {
		if err := c.resume(o.CheckpointDir); err != nil {
			return nil, err
		}
	} else if o.CheckpointDir != "" {
		// Numbered from 1, a new cluster's first checkpoint replaced the
		// commit record 1 of another job's checkpoints in the directory,
		// and a resume or an export then took that job's newer ones.
		next, err := checkpoint.NextClusterSeq(o.CheckpointDir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("coord: checkpoint directory: %w", err)
		default:
			c.m.st.Checkpoint.Seq = next - 1
		}
	}
	return c, nil
}

// SetPersist makes the coordinator save its state with save after every
// change, before it answers or publishes; a failed save makes it refuse
// everything after. Call it before Run.
func (c *Coordinator) SetPersist(save Persist) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.persist = save
}

// Restore replaces the coordinator's state with what a previous leader
// saved, before Run. epoch, if not 0, is the number Persist gave the last
// epoch saved: the state saved with it did not know it yet.
func (c *Coordinator) Restore(saved Saved, epoch uint64) error {
	m, err := RestoreMachine(c.opts.config(), saved, epoch, time.Now())
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = m
	c.restored = true
	c.publishLocked(m.published)
	return nil
}

// publishLocked shows l to long-pollers; c.mu is held.
func (c *Coordinator) publishLocked(l *layout.Layout) {
	c.published = l
	close(c.changed)
	c.changed = make(chan struct{})
}

// Layout returns the first layout whose version is above after, waiting
// for one until ctx ends. Only saved layouts are shown; a coordinator
// that could not save its state returns ErrNotPersisted: its layout may be
// one its successor never saw.
func (c *Coordinator) Layout(ctx context.Context, after uint64) (*layout.Layout, error) {
	for {
		c.mu.Lock()
		if err := c.failed; err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if c.published.Version > after {
			l := cloneLayout(c.published)
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

// current returns the layout last published, without waiting.
func (c *Coordinator) current() *layout.Layout {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cloneLayout(c.published)
}

// Done is closed when every worker has reported.
func (c *Coordinator) Done() <-chan struct{} { return c.done }

// Reports returns the reports received, by rank.
func (c *Coordinator) Reports() map[int]json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m.st.Reports)
}

// Checkpoints lists the checkpoints this coordinator committed.
func (c *Coordinator) Checkpoints() []CheckpointStat {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.Checkpoints()
}

// Heartbeat records that worker rank is alive. It is answered at once,
// even while a save is in flight: a heartbeat that waited for a save
// would make its worker look silent.
func (c *Coordinator) Heartbeat(rank int, clock int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return c.failed
	}
	c.m.SetNow(time.Now())
	return c.m.Heartbeat(rank, clock)
}

// HeartbeatConnClosed tells the machine that the connection worker
// rank's last heartbeat came on has closed (Machine.HeartbeatConnClosed).
func (c *Coordinator) HeartbeatConnClosed(rank int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return
	}
	c.m.SetNow(time.Now())
	c.m.HeartbeatConnClosed(rank)
}

// call steps the machine with a request and waits for its reply, which
// Run sends once the state it depends on is saved.
func (c *Coordinator) call(ctx context.Context, step func(m *Machine, id uint64)) (Reply, error) {
	c.mu.Lock()
	if err := c.failed; err != nil {
		c.mu.Unlock()
		return Reply{}, err
	}
	c.nextID++
	id, ch := c.nextID, make(chan Reply, 1)
	c.calls[id] = ch
	c.m.SetNow(time.Now())
	step(c.m, id)
	c.mu.Unlock()
	c.poke()
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.calls, id)
		c.m.Cancel(id)
		c.mu.Unlock()
		return Reply{}, ctx.Err()
	}
}

// event steps the machine with something that no request waits for.
func (c *Coordinator) event(step func(m *Machine)) {
	c.mu.Lock()
	c.m.SetNow(time.Now())
	step(c.m)
	c.mu.Unlock()
	c.poke()
}

// poke wakes Run.
func (c *Coordinator) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Run drives the machine until ctx ends: it ticks four times per failure
// timeout, at least every maxTickEvery (a silent worker is declared dead
// within a quarter timeout, or a quarter second, of the timeout after its
// last heartbeat), and hands each Ready to cycle.
func (c *Coordinator) Run(ctx context.Context) {
	defer c.wg.Wait()
	t := time.NewTicker(min(c.failureTimeout()/4, maxTickEvery))
	defer t.Stop()
	for {
		for c.cycle(ctx) {
		}
		var due <-chan time.Time // periodic progress waiting for its save
		c.mu.Lock()
		if at, ok := c.m.SaveDue(); ok {
			due = time.After(time.Until(at))
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			// Requests still waiting would wait for nothing: they go to
			// whichever replica leads next.
			c.mu.Lock()
			if c.failed == nil {
				c.stopLocked(fmt.Errorf("%w: coordinator stopped", api.ErrNotLeader))
			}
			c.mu.Unlock()
			return
		case <-c.kick:
		case <-due:
		case now := <-t.C:
			c.mu.Lock()
			c.m.Tick(now)
			c.sampleLocked(now)
			c.mu.Unlock()
		}
	}
}

// cycle saves one Ready outside the lock, then advances the machine,
// publishes and replies, then starts its effects; false if nothing was
// ready.
func (c *Coordinator) cycle(ctx context.Context) bool {
	c.mu.Lock()
	if c.failed != nil {
		c.mu.Unlock()
		return false
	}
	c.m.SetNow(time.Now())
	rd, ok := c.m.Ready()
	save := c.persist
	c.mu.Unlock()
	if !ok {
		return false
	}
	var epoch uint64
	var err error
	if rd.Save != nil && save != nil {
		sctx, cancel := context.WithTimeout(ctx, saveTimeout)
		epoch, err = save(sctx, rd.Save, rd.Placement)
		cancel()
	}
	c.mu.Lock()
	if err == nil {
		err = c.m.Advance(epoch)
	}
	if err != nil {
		if ctx.Err() != nil {
			// Stopping (SIGTERM): the unsaved change goes unanswered, as
			// after a failed save, but nothing failed; an ERROR here read
			// as if the coordinator had lost its state.
			c.log.Info("stopping: the change in progress was not saved", "err", err)
			c.stopLocked(fmt.Errorf("%w: %w", api.ErrNotPersisted, err))
		} else {
			c.failLocked(err)
		}
		c.mu.Unlock()
		return false
	}
	c.releaseLocked(rd)
	evs := c.recordLocked(rd)
	c.mu.Unlock()
	if len(evs) > 0 {
		c.goEffect(func() { c.saveEvents(ctx, evs) })
	}
	c.effects(ctx, rd)
	return true
}

// releaseLocked publishes rd's layout and sends its replies; c.mu is held.
func (c *Coordinator) releaseLocked(rd Ready) {
	if rd.Layout != nil {
		c.publishLocked(rd.Layout)
	}
	for _, r := range rd.Replies {
		if ch := c.calls[r.ID]; ch != nil {
			ch <- r
			delete(c.calls, r.ID)
		}
	}
	if rd.AllReported && !c.doneShut {
		close(c.done)
		c.doneShut = true
	}
	c.jobEndedLocked(rd.EndedJob)
}

// failLocked stops the coordinator after a failed save: its state may now
// be one its successor never sees, so it answers nothing more (clients go
// to the new leader); c.mu is held.
func (c *Coordinator) failLocked(err error) {
	c.log.Error("coordinator state not saved; answering nothing more", "err", err)
	c.stopLocked(fmt.Errorf("%w: %w", api.ErrNotPersisted, err))
}

// stopLocked makes every request, waiting or to come, fail with err;
// c.mu is held.
func (c *Coordinator) stopLocked(err error) {
	c.failed = err
	for id, ch := range c.calls {
		ch <- Reply{ID: id, Err: c.failed}
	}
	clear(c.calls)
	close(c.changed)
	c.changed = make(chan struct{})
}

// effects starts what a saved Ready asks for besides replies: deleting
// state versions nothing names, writing a checkpoint's commit record,
// dialling servers. Their results come back as events.
func (c *Coordinator) effects(ctx context.Context, rd Ready) {
	if len(rd.Drops) > 0 {
		c.goEffect(func() { c.dropStates(ctx, rd.Drops) })
	}
	if ck := rd.Commit; ck != nil {
		c.goEffect(func() {
			err := c.commit(ctx, ck)
			c.event(func(m *Machine) { m.Committed(ck.Seq, err) })
			if err == nil && c.opts.CheckpointKeep > 0 {
				c.prune(ck.Dir)
			}
		})
	}
	if rw := rd.Rewind; rw != nil {
		c.goEffect(func() { c.rewindTo(rw.Dir) })
	}
	for _, p := range rd.Probes {
		c.goEffect(func() {
			conn, err := c.probe(ctx, p.ID, p.Addr)
			if err == nil {
				conn.Close()
			}
			if ctx.Err() != nil {
				return // stopping: a failed dial says nothing of the server
			}
			c.event(func(m *Machine) { m.Probed(p, err == nil) })
		})
	}
}

func (c *Coordinator) goEffect(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}
