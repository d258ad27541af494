package ps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/table"
)

// Control is what a client needs from the coordinator: the control-plane
// contract of package api (Dial makes one that talks HTTP).
type Control interface {
	// Layout returns the first layout whose version is above after,
	// waiting until there is one or ctx ends.
	Layout(ctx context.Context, after uint64) (*layout.Layout, error)
	// CreateTable adds spec, or checks that an identical table exists, and
	// returns a layout that holds it.
	CreateTable(ctx context.Context, spec table.Spec) (*layout.Layout, error)
	// Acquire leases a worker a piece of a data partition in a pass (see
	// api.Grant).
	Acquire(ctx context.Context, rank, pass int) (api.Grant, error)
	// Progress records how far a worker trained its piece, and its state
	// there; the reply carries the piece's state version and end, and any
	// request to split it.
	Progress(ctx context.Context, u api.Update) (api.ProgressReply, error)
	// Split asks for the tail of another worker's piece (see api.Split).
	Split(ctx context.Context, s api.Split) (api.Grant, error)
	// State fetches a version of a partition's worker state.
	State(ctx context.Context, partition int, version uint64) ([]byte, error)
	// Heartbeat keeps a worker's pieces leased to it.
	Heartbeat(ctx context.Context, rank int, clock int64) error
	// Leave ends a worker's membership: its pieces return to the pool.
	Leave(ctx context.Context, rank int) error
}

// Options configure a Client.
type Options struct {
	// Rank is the worker's rank in [0, layout.Workers), or -1 for a client
	// that is not a worker (an evaluator or a tool): its reads never wait
	// and it has no clock.
	Rank int
	// NodeID names the client in servers' logs.
	NodeID string
	// JoinAs, with Dial, first joins the cluster as the worker of that ID:
	// Rank is then the rank the coordinator gives (the same again when a
	// worker of that ID joins again), and NodeID defaults to it.
	JoinAs string
	// DialTimeout bounds connecting to a server (5 s if 0).
	DialTimeout time.Duration
	// MaxRefused is how many non-finite updates of a table the servers may
	// refuse before every further operation on it fails with ErrNonFinite
	// (1000 if 0; negative means no limit).
	MaxRefused int64
	Logger     *slog.Logger
	// Network makes the connections to servers (TCP if nil).
	Network transport.Network
	// ServerWait is how long an operation waits for a server of its
	// layout to answer again, or for a layout without it, before it fails
	// with ErrNoServer (DefaultServerWait if 0): the last server on the
	// ring, restarted at its address, stays on it with no newer layout.
	// `terrace worker` passes its --join-timeout.
	ServerWait time.Duration
}

// DefaultServerWait is Options.ServerWait's default, the worker's join
// timeout's.
const DefaultServerWait = 30 * time.Second

// Client is a worker's connection to every server.
type Client struct {
	ctl  Control
	opts Options
	log  *slog.Logger

	mu      sync.RWMutex
	lay     *layout.Layout
	rm      *ring.Map
	conns   map[string]*transport.Client // by server ID
	tables  map[string]*Table
	closed  bool
	refresh chan struct{} // held while one goroutine refreshes the layout

	clock   atomic.Int64
	nextKey atomic.Uint32 // key-set cache ids, shared by all connections

	// id and seqs number this client's pushes for exactly-once retries.
	id   uint64
	seqs seqTracker

	parts    partStates  // per-partition worker state (state.go)
	observer Observer    // sees every minibatch of the partition loops (loop.go); under mu
	pacer    Pacer       // may hold the loop after each step (pace.go); under mu
	rr       *reassigner // peers' progress and reassignment (reassign.go); nil when off
	examples *Table      // ExamplesTable while RunPasses keeps the account (account.go); under mu

	stopBeat context.CancelFunc
	draining atomic.Bool
	idle     atomic.Bool // waiting for work: see wire.ClockIdle; set under tellMu
	// tellMu orders what this worker tells the servers about waiting for
	// work against its leaving it: the value a message reports and its
	// place on each connection, and toldIdle, the connections told
	// wire.ClockIdle since the worker last left idle, with the epoch to
	// send on. An install dials and tells a server idle before it
	// publishes the connection; the worker leaving idle must hear that
	// server's entry clock too (enterClock).
	tellMu   sync.Mutex
	toldIdle map[*transport.Client]uint64
	// asking are the connections a worker leaving idle asked for their
	// entry clock and has not heard yet; linger, those of them, or of
	// toldIdle, that a newer layout dropped: kept open until the worker
	// has heard them (enterClock), since the install that drops a server
	// would otherwise close the connection its answer comes back on. Under
	// tellMu.
	asking map[*transport.Client]bool
	linger map[*transport.Client]bool
	obs    *clientObs // metrics.go; nil in some tests

	// said are the servers ("id@addr") said to be unreachable since they
	// last answered a dial (unreachableSaid); others, those at whose
	// address another server answered, by the ID that did (checkServer).
	saidMu sync.Mutex
	said   map[string]bool
	others map[string]string

	// drained is closed by Drain (made on first use: drainInit).
	drained   chan struct{}
	drainInit sync.Once
}

// Connect waits for a ready layout and connects to every server.
func Connect(ctx context.Context, ctl Control, o Options) (*Client, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxRefused == 0 {
		o.MaxRefused = 1000
	}
	if o.ServerWait <= 0 {
		o.ServerWait = DefaultServerWait
	}
	c := &Client{ctl: ctl, opts: o, log: o.Logger, conns: map[string]*transport.Client{}, tables: map[string]*Table{}, refresh: make(chan struct{}, 1), id: rand.Uint64(), obs: newClientObs()}
	var after uint64
	var unreachable error // the last ready layout's, none of whose servers answered
	var seen atomic.Pointer[layout.Layout]
	if o.Rank >= 0 {
		// The worker joined before it connects, and the coordinator times
		// its silence from then. Until a layout's servers answer (a
		// cluster restarted whole waits for its servers to come back),
		// it heartbeats all the same: silent for the failure timeout, it
		// was declared dead and never trained.
		wctx, stopWaiting := context.WithCancel(ctx)
		defer stopWaiting()
		go c.beatWhileConnecting(wctx, &seen)
	}
	var failed *layout.Layout // the ready layout none of whose servers answered
	for {
		l, err := c.nextLayout(ctx, after, failed)
		if err != nil {
			if unreachable != nil {
				// It said only "waiting for the cluster layout", as if
				// the cluster had not formed, when its servers were gone.
				return nil, fmt.Errorf("ps: waiting for a layout with a server that answers: %w, after %w", err, unreachable)
			}
			return nil, fmt.Errorf("ps: waiting for the cluster layout: %w", err)
		}
		seen.Store(l)
		if l.Ready {
			err := c.install(ctx, l)
			if err == nil {
				break
			}
			if errors.Is(err, ErrClosed) || ctx.Err() != nil {
				return nil, err
			}
			// No server of the layout is reachable: a class-wide
			// revocation kills every ActivePS before the coordinator
			// falls back to the BackupPS, or a cluster restarted whole
			// waits for its servers. Wait for a newer layout, as
			// refreshLayout does for a running client, and try this one
			// again meanwhile (nextLayout).
			if failed == nil || failed.Version != l.Version {
				c.log.Warn("no server of the layout reachable; waiting for a newer one, or for these to answer", "version", l.Version, "err", err)
			}
			unreachable, failed = err, l
		}
		after = l.Version
	}
	if o.Rank >= 0 && o.Rank >= c.lay.Workers {
		if l, err := ctl.Layout(ctx, c.lay.Version); err == nil && o.Rank < l.Workers {
			c.install(ctx, l)
		} else {
			return nil, fmt.Errorf("%w: rank %d, but the layout has %d workers", ErrBadArgument, o.Rank, c.lay.Workers)
		}
	}
	if o.Rank >= 0 {
		// A worker joining a running job starts at the clock the servers
		// count it at, not at 0: reads they answered before it joined did
		// not wait for it (wire.ClockReplySize).
		if err := c.enterClock(ctx, 0); err != nil {
			c.Close()
			return nil, fmt.Errorf("ps: telling the servers this worker's clock: %w", err)
		}
		hctx, stop := context.WithCancel(context.Background())
		c.stopBeat = stop
		go c.heartbeat(hctx)
		go c.follow(hctx)
	}
	return c, nil
}

// nextLayout returns the first layout whose version is above after. With
// failed, a ready layout none of whose servers answered, it returns failed
// again if no newer one comes within a fifth of its failure timeout: a
// server may come back at its address under the same layout (the last
// server on the ring, restarted, stays on it), and a worker waiting only
// for a newer layout waited until its join timeout.
func (c *Client) nextLayout(ctx context.Context, after uint64, failed *layout.Layout) (*layout.Layout, error) {
	if failed == nil {
		return c.ctl.Layout(ctx, after)
	}
	wait, cancel := context.WithTimeout(ctx, failed.FailureTimeout()/5)
	defer cancel()
	l, err := c.ctl.Layout(wait, after)
	if err != nil && wait.Err() != nil && ctx.Err() == nil {
		return failed, nil
	}
	return l, err
}

// install adopts layout l, dialling servers that are new.
func (c *Client) install(ctx context.Context, l *layout.Layout) error {
	rm, err := l.Ring()
	if err != nil {
		return fmt.Errorf("ps: layout %d: %w", l.Version, err)
	}
	conns := make(map[string]*transport.Client, len(rm.Servers))
	var dialErrs []error
	c.mu.RLock()
	for _, s := range rm.Servers {
		if cc, ok := c.conns[s.ID]; ok && cc.Addr() == s.Addr && cc.Err() == nil {
			conns[s.ID] = cc
		}
	}
	c.mu.RUnlock()
	worker := uint32(wire.NoWorker)
	if c.opts.Rank >= 0 {
		worker = uint32(c.opts.Rank)
	}
	sent := map[*transport.Client]int64{} // the clock sendClockOn told each new connection
	for _, s := range rm.Servers {
		if conns[s.ID] != nil {
			continue
		}
		cc, err := transport.Dial(ctx, s.Addr, transport.DialOptions{Hello: wire.Hello{Worker: worker, Client: c.id, Node: c.opts.NodeID}, DialTimeout: c.opts.DialTimeout, Network: c.opts.Network})
		if err != nil {
			// A server that is down makes only its own requests wait for a
			// layout without it; the rest of the cluster is usable. A dial
			// cut short because the client is closing is not news, nor one
			// refused by a cluster that ends with its job: its servers exit
			// (a worker still finishing heard of them as they went).
			switch {
			case ctx.Err() != nil:
			case l.JobDone && l.Shutdown:
				c.log.Debug("server exited with the cluster", "server", s.ID, "addr", s.Addr, "err", err)
			case c.unreachableSaid(s, true):
				// Said once until it answers: a client waiting for it
				// dials it every fifth of a failure timeout.
				c.log.Debug("server unreachable", "server", s.ID, "addr", s.Addr, "err", err)
			default:
				c.log.Warn("server unreachable", "server", s.ID, "addr", s.Addr, "err", err)
			}
			dialErrs = append(dialErrs, fmt.Errorf("ps: server %s: %w", s.ID, err))
			continue
		}
		if err := c.stillOther(ctx, cc, s); err != nil {
			cc.Close()
			if !c.unreachableSaid(s, true) {
				c.log.Warn("server unreachable", "server", s.ID, "addr", s.Addr, "err", err)
			}
			dialErrs = append(dialErrs, fmt.Errorf("ps: server %s: %w", s.ID, err))
			continue
		}
		conns[s.ID] = cc
		c.unreachableSaid(s, false)
		sent[cc] = c.sendClockOn(cc, rm.Epoch)
	}
	c.tellMu.Lock() // before mu, as enterClock takes them
	defer c.tellMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		for _, cc := range conns {
			cc.Close()
		}
		return ErrClosed
	}
	for id, cc := range c.conns {
		if conns[id] == cc {
			continue
		}
		if _, told := c.toldIdle[cc]; told || c.asking[cc] {
			if c.linger == nil {
				c.linger = map[*transport.Client]bool{}
			}
			c.linger[cc] = true
			continue
		}
		cc.Close()
	}
	if c.lay == nil || l.Version > c.lay.Version {
		c.lay, c.rm = l, rm
	}
	c.conns = conns
	// A clock sent, or idle entered, between the dial and now went to the
	// connections held before only: a new one heard a stale value. Told
	// again here, before anything else this worker sends on it. One told
	// idle that the worker has left idle since was in toldIdle when it
	// left, and has heard its clock.
	for cc, v := range sent {
		if now := c.clockToTell(); v != now && v != wire.ClockIdle {
			c.tellClock(cc, rm.Epoch, now)
		}
	}
	if len(conns) == 0 {
		return fmt.Errorf("%w (layout %d): %w", ErrNoServer, l.Version, errors.Join(dialErrs...))
	}
	return nil
}

// installWaiting installs l or, while none of its servers is reachable,
// waits for one to answer or for a newer layout (awaitServers), until ctx
// ends. A class-wide revocation takes every ActivePS at once, and the
// coordinator falls back to the BackupPS only once it has found them
// gone: the layouts in between reach no server. A worker that met one
// while opening its tables or after a server's "stale epoch" failed
// (simulation, tiers seed 50074: a replacement worker started 11 ms
// before the revocation).
func (c *Client) installWaiting(ctx context.Context, l *layout.Layout) error {
	err := c.install(ctx, l)
	if err == nil || !errors.Is(err, ErrNoServer) || ctx.Err() != nil {
		return err
	}
	return c.awaitServers(ctx, l, err)
}

// current returns the layout, range map and connections in use.
func (c *Client) current() (*ring.Map, map[string]*transport.Client, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, nil, ErrClosed
	}
	return c.rm, c.conns, nil
}

// refreshLayout fetches a layout newer than epoch seen when a server said
// it has one; with seen 0 it re-installs the current layout, which re-dials
// any connection that broke, and waits while a server of it does not
// answer (awaitServers).
func (c *Client) refreshLayout(ctx context.Context, seen uint64) error {
	select {
	case c.refresh <- struct{}{}:
		defer func() { <-c.refresh }()
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.RLock()
	cur := c.lay
	c.mu.RUnlock()
	if seen == 0 {
		err := c.install(ctx, cur)
		if err == nil {
			if err = c.unreachable(cur); err == nil {
				return nil
			}
		}
		if ctx.Err() != nil {
			return err
		}
		return c.awaitServers(ctx, cur, err)
	}
	if cur.Epoch > seen {
		return nil // another goroutine already moved on
	}
	l, err := c.ctl.Layout(ctx, cur.Version)
	if err != nil {
		return err
	}
	return c.installWaiting(ctx, l)
}

// awaitServers waits, after a server of layout cur did not answer (err
// says which), for the coordinator to publish a layout it can install, or
// for cur's servers to answer again: it tries cur again every fifth of its
// failure timeout (nextLayout), as Connect does. It waited only for a
// newer layout, and the last server on the ring, restarted at its
// address, stays on it with none: the worker gave up. A layout with no
// reachable server (a class-wide revocation takes the ActivePS one by one
// before the fallback to the BackupPS) is waited past. It returns when
// ctx ends, with err, or at once, wrapping ErrDrained too, once the
// client is draining and no server of its layout answers: nothing it
// sends can be acknowledged, and the drain records what was.
func (c *Client) awaitServers(ctx context.Context, cur *layout.Layout, err error) error {
	said := false
	for {
		if c.Draining() && errors.Is(err, ErrNoServer) {
			return fmt.Errorf("%w: %w", ErrDrained, err)
		}
		if !said && errors.Is(err, ErrNoServer) {
			c.log.Warn("no server of the layout answers: waiting for one to answer again, or for a newer layout", "version", cur.Version, "err", err)
			said = true
		}
		l, lerr := c.nextLayout(ctx, cur.Version, cur)
		if ctx.Err() != nil {
			lerr = ctx.Err() // the patience's end, not the coordinator's
		}
		if lerr != nil {
			return fmt.Errorf("%w, after %w", lerr, err)
		}
		ierr := c.install(ctx, l)
		if ctx.Err() != nil {
			return fmt.Errorf("%w, after %w", ctx.Err(), err)
		}
		if ierr == nil {
			if l.Version != cur.Version {
				return nil
			}
			if ierr = c.unreachable(l); ierr == nil {
				return nil
			}
		}
		if said && ierr != nil && !errors.Is(ierr, ErrNoServer) {
			said = false // some answer: say it again should they all stop
		}
		cur, err = l, ierr
	}
}

// unreachableSaid reports whether server s was said to be unreachable
// since it last answered, and records whether it is now (down).
func (c *Client) unreachableSaid(s ring.Server, down bool) bool {
	c.saidMu.Lock()
	defer c.saidMu.Unlock()
	key := s.ID + "@" + s.Addr
	said := c.said[key]
	switch {
	case down && c.said == nil:
		c.said = map[string]bool{key: true}
	case down:
		c.said[key] = true
	default:
		delete(c.said, key)
	}
	return said
}

// errOtherServer: another server answers at a server's address.
var errOtherServer = errors.New("another server answers at its address")

// checkServer asks the server this client reaches as id who it is, after
// it refused a request's placement (keys not its own, a key list or table
// it does not know) under the epoch this client holds.
// Another server answers at a dead server's address once the port is
// given to it (the README's `terrace server`, started again without --id,
// names itself anew): it refused every request, and the worker's retries
// ran out in about a second ("key 0 belongs to server s0"). Found so, the
// connection is closed and the address taken as unreachable until id
// answers there again (stillOther), so the requests wait for it as for a
// dead server.
func (c *Client) checkServer(id string) {
	c.mu.RLock()
	cc := c.conns[id]
	var srv ring.Server
	if c.rm != nil {
		if i := c.rm.Index(id); i >= 0 {
			srv = c.rm.Servers[i]
		}
	}
	c.mu.RUnlock()
	if cc == nil || srv.ID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.dialTimeout())
	who, _, err := cc.Ping(ctx)
	cancel()
	if err != nil || who == "" || who == id {
		return
	}
	c.saidMu.Lock()
	if c.others == nil {
		c.others = map[string]string{}
	}
	c.others[id+"@"+srv.Addr] = who
	c.saidMu.Unlock()
	c.log.Warn("another server answers at a server's address: taken as unreachable until the server answers there again", "server", id, "addr", srv.Addr, "answers", who)
	cc.Close()
}

// stillOther checks, on a new connection to s, whether the server that
// answered at its address before (checkServer) still does: err says so.
func (c *Client) stillOther(ctx context.Context, cc *transport.Client, s ring.Server) error {
	key := s.ID + "@" + s.Addr
	c.saidMu.Lock()
	other := c.others[key]
	c.saidMu.Unlock()
	if other == "" {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, c.dialTimeout())
	who, _, err := cc.Ping(pctx)
	cancel()
	switch {
	case err != nil:
		return fmt.Errorf("asking who answers at %s: %w", s.Addr, err)
	case who != "" && who != s.ID:
		return fmt.Errorf("%w: %s answers at %s", errOtherServer, who, s.Addr)
	}
	c.saidMu.Lock()
	delete(c.others, key)
	c.saidMu.Unlock()
	return nil
}

// dialTimeout is Options.DialTimeout, 5 s if 0 (as transport.Dial's).
func (c *Client) dialTimeout() time.Duration {
	if c.opts.DialTimeout > 0 {
		return c.opts.DialTimeout
	}
	return 5 * time.Second
}

// unreachable names the servers of l this client holds no connection to;
// nil if none.
func (c *Client) unreachable(l *layout.Layout) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var missing []string
	for _, s := range l.Servers {
		if cc := c.conns[s.ID]; cc == nil || cc.Err() != nil {
			missing = append(missing, s.ID)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("ps: servers %v of layout %d unreachable", missing, l.Version)
}

// redial re-installs the current layout, which re-dials the connections
// that broke, unless another goroutine is refreshing the layout: it
// re-dials them, and may be waiting for a server to answer, which the
// heartbeat must not wait behind.
func (c *Client) redial(ctx context.Context) {
	select {
	case c.refresh <- struct{}{}:
		defer func() { <-c.refresh }()
	default:
		return
	}
	if l := c.Layout(); l != nil {
		_ = c.install(ctx, l)
	}
}

// follow installs every layout the coordinator publishes, so that a worker
// waiting for work or for a read still connects to servers that join and
// tells them its clock (sendClockOn), which a read of another worker's may
// be waiting for there.
func (c *Client) follow(ctx context.Context) {
	for ctx.Err() == nil {
		c.mu.RLock()
		v := c.lay.Version
		c.mu.RUnlock()
		l, err := c.ctl.Layout(ctx, v)
		if err == nil {
			select {
			case c.refresh <- struct{}{}:
				err = c.install(ctx, l)
				<-c.refresh
			case <-ctx.Done():
				return
			}
		}
		if err != nil && ctx.Err() == nil {
			c.log.Debug("following the layout", "err", err)
			select {
			case <-time.After(c.heartbeatEvery()):
			case <-ctx.Done():
			}
		}
	}
}

// Rank is the worker's rank, or -1.
func (c *Client) Rank() int { return c.opts.Rank }

// Layout returns the layout in use.
func (c *Client) Layout() *layout.Layout {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.lay
}

// Table returns the table called name, waiting for the coordinator to
// announce it if need be.
func (c *Client) Table(ctx context.Context, name string) (*Table, error) {
	for {
		c.mu.Lock()
		if t, ok := c.tables[name]; ok {
			c.mu.Unlock()
			return t, nil
		}
		lt, ok := c.lay.Table(name)
		version := c.lay.Version
		if ok {
			t := newTable(c, lt)
			c.tables[name] = t
			c.mu.Unlock()
			return t, nil
		}
		c.mu.Unlock()
		l, err := c.ctl.Layout(ctx, version)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrNoTable, name, err)
		}
		if err := c.installWaiting(ctx, l); err != nil {
			return nil, err
		}
	}
}

// CreateTable creates the table described by spec, or opens it if an
// identical one exists; a different table of the same name is an error.
func (c *Client) CreateTable(ctx context.Context, spec table.Spec) (*Table, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadArgument, err)
	}
	l, err := c.ctl.CreateTable(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("ps: create table %q: %w", spec.Name, err)
	}
	if err := c.installWaiting(ctx, l); err != nil {
		return nil, err
	}
	return c.Table(ctx, spec.Name)
}

// Clock returns the worker's current clock.
func (c *Client) Clock() int64 { return c.clock.Load() }

// Tick ends the worker's current clock: every server learns that this
// worker's updates for it have all been sent. Reads under BSP and SSP wait
// on these clocks.
func (c *Client) Tick() *Future { return c.sendClock(c.clock.Add(1)) }

// Finish tells the servers that this worker will send no more clocks, so
// that it no longer holds back workers that go on.
func (c *Client) Finish() *Future {
	c.clock.Store(wire.ClockFinished)
	return c.sendClock(wire.ClockFinished)
}

// sendClockOn tells a server newly connected to (a joiner, or one whose
// connection broke) this worker's clock: the clocks sent while it was not
// connected never reached it, and a read waiting there for this worker
// would otherwise wait for a clock this worker, blocked on the read, never
// sends.
// It returns the clock it told (0: none).
func (c *Client) sendClockOn(cc *transport.Client, epoch uint64) int64 {
	c.tellMu.Lock()
	defer c.tellMu.Unlock()
	v := c.clockToTell()
	c.tellClock(cc, epoch, v)
	return v
}

// leaveIdle ends waiting for work without entering a clock, on a way out
// of work that trains nothing (drained, failed): the servers hear the
// clock as it stands at the next restatement, as a worker that enters.
func (c *Client) leaveIdle() {
	c.tellMu.Lock()
	defer c.tellMu.Unlock()
	c.idle.Store(false)
	c.toldIdle = nil
	c.closeLingering()
}

// closeLingering closes the dropped connections no answer is awaited on
// any more. Under tellMu.
func (c *Client) closeLingering() {
	for cc := range c.linger {
		if _, told := c.toldIdle[cc]; !told && !c.asking[cc] {
			cc.Close()
			delete(c.linger, cc)
		}
	}
}

// clockToTell is the clock a server should count this worker at now:
// wire.ClockIdle while it waits for work.
func (c *Client) clockToTell() int64 {
	if c.idle.Load() {
		return wire.ClockIdle
	}
	return c.clock.Load()
}

// tellClock sends clock v on cc, not waiting for the answer; under tellMu.
func (c *Client) tellClock(cc *transport.Client, epoch uint64, v int64) {
	if c.opts.Rank < 0 || v == 0 {
		return
	}
	if v == wire.ClockIdle {
		c.noteToldIdle(cc, epoch)
	}
	c.callClock(cc, epoch, v, &transport.Call{
		OnReply: func(h wire.Header, r *wire.Reader) error {
			_, err := r.Payload(h) // a refusal is cured by the next clock
			return err
		},
		OnFail: func(error) {},
	})
}

// noteToldIdle records that cc heard wire.ClockIdle under epoch: the
// worker leaving idle asks it for its entry clock (enterClock) even if a
// newer layout no longer holds it, and an install that drops it keeps the
// connection open until then (linger). A server told idle answered reads
// without this worker's clock, on the promise that it comes back at or
// above the minimum those reads saw; the worker must hear that minimum
// from every such server, not only from the ring it comes back to. The
// simulation's tiers seed 381327: a worker told the stage-3 heads it
// waited for work, one head, its minimum raised to 34 by the idle
// message, answered a read at clock 34; the switch to stage 1 that
// dropped the heads closed the connections their answer "start at 34"
// came back on, and the worker went on from clock 30 on the new ring,
// pushes the read had not waited for. Under tellMu.
func (c *Client) noteToldIdle(cc *transport.Client, epoch uint64) {
	if c.toldIdle == nil {
		c.toldIdle = map[*transport.Client]uint64{}
	}
	c.toldIdle[cc] = epoch
}

// waitForWork tells every server that this worker waits for work
// (wire.ClockIdle): the others finish their pieces while it waits, and
// must not wait for its clock meanwhile. enterClock ends it.
func (c *Client) waitForWork() *Future {
	c.tellMu.Lock()
	defer c.tellMu.Unlock()
	c.idle.Store(true)
	return c.sendClock(wire.ClockIdle)
}

// callClock sends clock v of this worker on cc.
func (c *Client) callClock(cc *transport.Client, epoch uint64, v int64, call *transport.Call) {
	var b [wire.ClockSize]byte
	wire.Clock{Worker: uint32(c.opts.Rank), Clock: v}.Put(&b)
	id := cc.NextID()
	cc.Call(wire.NewFrame(wire.Header{Type: wire.TClock, Epoch: epoch, ReqID: id}, b[:]), id, call, nil)
}

// enterClock sends clock v, as a worker that starts or comes back from
// waiting for work, and moves its clock up to the highest any server
// counts it at; if that is above v, the servers learn the new clock too.
//
// A server that does not answer within enterWait (a silent machine, about
// to be declared failed) is not waited for: it answers reads without this
// worker only until the worker's next clock reaches it.
//
// A worker leaving idle sends it, under tellMu, to every server it holds
// and every one told idle since (toldIdle: an install may have dialled
// one and not published it yet), so that it learns each entry clock
// before it pushes; a server told idle after this hears the clock first
// (install). The simulation's tiers seed 132665 caught the race: a new
// head, told idle as the worker left idle, answered a read without
// waiting for the worker's clock.
func (c *Client) enterClock(ctx context.Context, v int64) error {
	var high atomic.Int64
	high.Store(v)
	c.tellMu.Lock()
	c.clock.Store(v)
	c.idle.Store(false)
	extra := c.toldIdle
	c.toldIdle = nil
	f := c.sendClockFrom(v, &high, extra)
	c.tellMu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, enterWait)
	err := f.Wait(wctx)
	cancel()
	c.tellMu.Lock()
	c.asking = nil
	c.closeLingering()
	c.tellMu.Unlock()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		c.log.Warn("a server did not answer this worker's clock in time; going on", "wait", enterWait)
	case err != nil:
		return err
	}
	c.clock.Store(high.Load())
	if h := high.Load(); h > v {
		// Sent on each server's connection before anything else this
		// worker sends there: no need to wait.
		c.sendClock(h)
	}
	return nil
}

// enterWait bounds how long enterClock waits for the servers' answers.
const enterWait = 2 * time.Second

func (c *Client) sendClock(v int64) *Future { return c.sendClockFrom(v, nil, nil) }

// sendClockFrom sends clock v to every server, and to the connections in
// extra that are not the layout's (with the epoch each maps to); with high
// not nil, it raises high to the clocks the servers answer they count this
// worker at. Sending wire.ClockIdle, or with high, the caller holds
// tellMu.
func (c *Client) sendClockFrom(v int64, high *atomic.Int64, extra map[*transport.Client]uint64) *Future {
	if c.opts.Rank < 0 {
		return failed(fmt.Errorf("%w: a client without a rank has no clock", ErrBadArgument))
	}
	rm, conns, err := c.current()
	if err != nil {
		return failed(err)
	}
	// Connections told idle that the layout does not hold (an install has
	// not published them yet): rare, and none on a tick.
	var more []*transport.Client
	for cc := range extra {
		if !slices.ContainsFunc(rm.Servers, func(s ring.Server) bool { return conns[s.ID] == cc }) {
			more = append(more, cc)
		}
	}
	// Clocks are absolute, so a server that misses one (it is down, or its
	// connection broke) is brought up to date by the next; a failed send
	// is not an error for the worker.
	f := newFuture(len(rm.Servers) + len(more))
	skip := func(error) { f.partDone(nil) }
	send := func(id string, cc *transport.Client, epoch uint64) {
		if cc == nil || cc.Err() != nil {
			skip(nil)
			return
		}
		if v == wire.ClockIdle {
			c.noteToldIdle(cc, epoch)
		}
		if high != nil {
			if c.asking == nil {
				c.asking = map[*transport.Client]bool{}
			}
			c.asking[cc] = true
		}
		c.callClock(cc, epoch, v, &transport.Call{
			OnReply: func(h wire.Header, r *wire.Reader) error {
				p, err := r.Payload(h)
				if err != nil {
					return err
				}
				if err := replyError(id, h, p); err != nil || high == nil {
					f.partDone(err)
					return nil
				}
				counted, err := wire.ParseClockReply(p)
				if err == nil && counted < wire.ClockIdle {
					for cur := high.Load(); counted > cur && !high.CompareAndSwap(cur, counted); cur = high.Load() {
					}
				}
				f.partDone(err)
				return nil
			},
			OnFail: skip,
		})
	}
	for _, s := range rm.Servers {
		send(s.ID, conns[s.ID], rm.Epoch)
	}
	for _, cc := range more {
		send(cc.Addr(), cc, extra[cc])
	}
	return f
}

func replyError(server string, h wire.Header, p []byte) error {
	if h.Type == wire.TReply {
		return nil
	}
	if h.Type != wire.TError {
		return fmt.Errorf("%w: %v frame in reply", wire.ErrCorrupt, h.Type)
	}
	code, msg, err := wire.ParseError(p)
	if err != nil {
		return err
	}
	return &ServerError{Server: server, Code: code, Msg: msg}
}

// Close closes every connection; operations in flight fail.
func (c *Client) Close() error {
	c.tellMu.Lock() // before mu, as enterClock and install take them
	defer c.tellMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.stopBeat != nil {
		c.stopBeat()
	}
	var errs []error
	for _, cc := range c.conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for cc := range c.linger {
		cc.Close()
	}
	c.linger = nil
	return errors.Join(errs...)
}
