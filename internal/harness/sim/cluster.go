package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/dataplane/simnet"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/process/evict"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/internal/server"
	"github.com/terrace-ml/terrace/ps"
)

// Config is the shape of a simulated cluster. Zero fields take the
// defaults written on them.
type Config struct {
	// Seed fixes everything the simulation chooses: link delays, and
	// whatever the workload and the faults draw from it.
	Seed uint64
	// Servers and Workers start the cluster (3 and 2); joins stop at
	// MaxServers (6).
	Servers, Workers, MaxServers int
	// Replication is k, the copies of each slot (2).
	Replication int
	// Partitions is how many data partitions workers lease (6).
	Partitions int
	// FailureTimeout is the coordinator's (1 s if 0, the coordinator's
	// default until the eighteenth session: the random schedules'
	// partitions of up to 2 s were drawn against it, and under the 3 s
	// default most would make no detection).
	FailureTimeout time.Duration
	// MinDelay and MaxDelay bound a link's one-way delay (0.2 and 2 ms).
	MinDelay, MaxDelay time.Duration
	// ServerClass and WorkerClass name the machine class ("spot",
	// "on-demand", ...) of the i-th server or worker started, counting
	// joins and replacements; nil means every node is of class "".
	ServerClass, WorkerClass func(i int) string
	// TimeLimit bounds training, in fake time (2 minutes).
	TimeLimit time.Duration
	// Stage, when set, runs tiers of reliability (issue 11): nodes of
	// class "transient" or "spot" are on transient machines, every other
	// on reliable ones, and the cluster forms in Stage, streaming to the
	// BackupPS every SyncInterval (the coordinator's default if 0).
	Stage        tier.Stage
	SyncInterval time.Duration
	// CheckpointEvery, when set, gives the coordinator a checkpoint
	// directory (a temporary one, removed when the run ends) and takes a
	// checkpoint every that many passes; OnCopiesLost is the coordinator's
	// --on-copies-lost (continue if empty).
	CheckpointEvery int
	OnCopiesLost    coord.CopiesLostPolicy
}

// tierClass is the machine class of a node of class name.
func tierClass(name string) tier.Class {
	if name == "transient" || name == "spot" {
		return tier.Transient
	}
	return tier.Reliable
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Servers, 3)
	def(&c.Workers, 2)
	def(&c.MaxServers, 6)
	def(&c.Replication, 2)
	def(&c.Partitions, 6)
	if c.MinDelay == 0 && c.MaxDelay == 0 {
		c.MinDelay, c.MaxDelay = 200*time.Microsecond, 2*time.Millisecond
	}
	if c.TimeLimit == 0 {
		c.TimeLimit = 2 * time.Minute
	}
	if c.FailureTimeout == 0 {
		c.FailureTimeout = time.Second
	}
	return c
}

// Role is what a node of the cluster is.
type Role int

const (
	RoleServer Role = iota
	RoleWorker
)

// Node is one server or worker process of the cluster, with its own host
// on the simulated network. Nodes are never reused: a replacement is a new
// node, with a new ID (and, for a worker, a new rank).
type Node struct {
	ID    string
	Class string
	Role  Role

	stop    context.CancelFunc
	notices chan evict.Notice
	srv     atomic.Pointer[server.Server]
	status  atomic.Pointer[string]
	slow    atomic.Uint64 // float64 bits: compute time factor

	// Under Cluster.mu:
	killed  bool // by a fault
	leaving bool // told to drain
	done    bool // returned
	err     error
}

// Status sets what a worker is doing, for a stall's report.
func (n *Node) Status(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	n.status.Store(&s)
}

// Compute spends d of fake time computing, or longer while the worker is
// slowed down (SlowWorker). It reports false if ctx ended first.
func (n *Node) Compute(ctx context.Context, d time.Duration) bool {
	if f := math.Float64frombits(n.slow.Load()); f > 0 {
		d = time.Duration(float64(d) * f)
	}
	return sleep(ctx, d)
}

// Cluster is a whole simulated cluster: a coordinator, servers and
// workers, each a real node (package node) on its own host of a simnet
// network, in the fake time of the synctest bubble it runs in.
type Cluster struct {
	cfg       Config
	start     time.Time
	net       *simnet.Net
	coord     *coord.Coordinator
	coordAddr string
	book      *Book
	copies    *Copies
	log       *slog.Logger
	logs      *lineLog
	workload  Workload
	alert     func(string)
	peers     *ps.PeerHub     // the workers' progress messages (Counters.Reassign)
	stolen    atomic.Int64    // tails workers took from peers
	ctx       context.Context // ends when the cluster stops
	cancel    context.CancelFunc
	nodes     sync.WaitGroup
	results   chan *Node

	mu         sync.Mutex
	servers    []*Node
	workers    []*Node
	live       int  // workers started and not yet returned
	pending    int  // replacements not yet started
	failed     int  // workers that failed
	stopping   bool // no more workers start
	timeline   []string
	violations []Violation
	lossKeys   map[uint64]int64 // increments lost, by key
	lossIncs   int64
	ckptDir    string
	rewinds    rewinds
	seen       []versionMark // the layouts watchLayouts saw, in order
}

// versionMark is a layout version watchLayouts saw, and the book event
// at which it did.
type versionMark struct {
	version uint64
	event   int64
}

// markOf returns the book event at which watchLayouts first saw layout
// version or a later one (it may skip versions), or a new event if it
// saw none yet.
func (c *Cluster) markOf(version uint64) int64 {
	c.mu.Lock()
	i, _ := slices.BinarySearchFunc(c.seen, version, func(m versionMark, v uint64) int { return cmp.Compare(m.version, v) })
	var e int64
	if i < len(c.seen) {
		e = c.seen[i].event
	}
	c.mu.Unlock()
	if e == 0 {
		e = c.book.Mark()
	}
	return e
}

// Seed returns the cluster's seed.
func (c *Cluster) Seed() uint64 { return c.cfg.Seed }

// Config returns the cluster's configuration, defaults filled in.
func (c *Cluster) Config() Config { return c.cfg }

// Book returns the account of pushes, clocks and reads.
func (c *Cluster) Book() *Book { return c.book }

// Copies returns the account of which servers hold which slots.
func (c *Cluster) Copies() *Copies { return c.copies }

// Net returns the simulated network, for faults that act on it.
func (c *Cluster) Net() *simnet.Net { return c.net }

// Since returns the fake time since the cluster started.
func (c *Cluster) Since() time.Duration { return time.Since(c.start) }

func (c *Cluster) since() string { return fmt.Sprintf("%.3fs", c.Since().Seconds()) }

// Note adds an event to the timeline a failure prints.
func (c *Cluster) Note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timeline = append(c.timeline, c.since()+" "+fmt.Sprintf(format, args...))
}

// Violate records a broken invariant of a kind (one of the Kind
// constants, or an invariant's own).
func (c *Cluster) Violate(kind, format string, args ...any) {
	v := Violation{Kind: kind, Detail: fmt.Sprintf(format, args...), At: c.Since()}
	c.mu.Lock()
	c.violations = append(c.violations, v)
	c.timeline = append(c.timeline, c.since()+" VIOLATION "+v.String())
	n := 0
	for _, o := range c.violations {
		if o.Kind == kind {
			n++
		}
	}
	c.mu.Unlock()
	if c.alert != nil && n <= maxPerKind {
		c.alert(fmt.Sprintf("at %s: %v", c.since(), v))
	}
}

// ExpectLoss records increments of a key found missing where Copies says
// its slot lost every copy: expected, and counted in the report.
func (c *Cluster) ExpectLoss(key uint64, increments int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lossKeys == nil {
		c.lossKeys = map[uint64]int64{}
	}
	c.lossKeys[key] += increments
	c.lossIncs += increments
}

// Layout returns the coordinator's current layout (asked directly, not
// over the network).
func (c *Cluster) Layout() *layout.Layout {
	l, err := c.coord.Layout(c.ctx, 0)
	if err != nil {
		// There is always a layout after version 0; only a stopped
		// cluster answers this.
		return &layout.Layout{}
	}
	return l
}

// Alive returns the nodes of a role that were started and have not been
// killed, told to leave, or returned, in the order they started.
func (c *Cluster) Alive(role Role) []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := c.servers
	if role == RoleWorker {
		all = c.workers
	}
	var out []*Node
	for _, n := range all {
		if !n.killed && !n.leaving && !n.done {
			out = append(out, n)
		}
	}
	return out
}

// isAlive reports whether node id is one Alive would list.
func (c *Cluster) isAlive(id string) bool {
	n := c.node(id)
	if n == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !n.killed && !n.leaving && !n.done
}

// node returns the node with id, or nil.
func (c *Cluster) node(id string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range slices.Concat(c.servers, c.workers) {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// goNode runs a node's process until it returns.
func (c *Cluster) goNode(fn func()) {
	c.nodes.Add(1)
	go func() {
		defer c.nodes.Done()
		fn()
	}()
}

// startCoordinator starts the coordinator and waits until it listens.
func (c *Cluster) startCoordinator() error {
	// Epochs numbered as etcd revisions would be: growing, with gaps.
	var rev uint64
	persist := func(_ context.Context, _ *coord.Save, placement *layout.Layout) (uint64, error) {
		rev += 3
		if placement == nil {
			return 0, nil
		}
		return rev, nil
	}
	ready := make(chan struct{})
	failed := make(chan error, 1)
	c.goNode(func() {
		failed <- node.RunCoordinator(c.ctx, node.CoordinatorConfig{
			Listen: "127.0.0.1:0", Network: c.net.Host("coordinator"), Logger: c.log.With("node", "coordinator"),
			Options: coord.Options{Servers: c.cfg.Servers, Workers: c.cfg.Workers, Partitions: c.cfg.Partitions,
				Replication: c.cfg.Replication, FailureTimeout: c.cfg.FailureTimeout,
				Stage: c.cfg.Stage, SyncInterval: c.cfg.SyncInterval,
				CheckpointDir: c.ckptDir, CheckpointEvery: c.cfg.CheckpointEvery, OnCopiesLost: c.cfg.OnCopiesLost},
			Ready: func(co *coord.Coordinator, addr string) {
				co.SetPersist(persist)
				c.coord, c.coordAddr = co, addr
				close(ready)
			},
		})
	})
	select {
	case <-ready:
		return nil
	case err := <-failed:
		return fmt.Errorf("coordinator: %w", err)
	}
}

// StartServer starts a server of class (a new host, "server-N"), and
// returns it once it has joined: as a joiner, when the cluster is running.
func (c *Cluster) StartServer(ctx context.Context, class string) (*Node, error) {
	c.mu.Lock()
	i := len(c.servers)
	if class == "" && c.cfg.ServerClass != nil {
		class = c.cfg.ServerClass(i)
	}
	sctx, stop := context.WithCancel(c.ctx)
	n := &Node{ID: fmt.Sprintf("server-%d", i), Class: class, Role: RoleServer, stop: stop, notices: make(chan evict.Notice, 1)}
	c.servers = append(c.servers, n)
	c.mu.Unlock()
	ready := make(chan struct{})
	c.goNode(func() {
		err := node.RunServer(sctx, node.ServerConfig{
			ID: n.ID, Listen: "127.0.0.1:0", Coordinator: c.coordAddr, Network: c.net.Host(n.ID),
			Logger: c.log.With("node", n.ID), Notices: n.notices, Machine: c.machine(n), Class: c.class(n),
			Ready:     func(s *server.Server) { n.srv.Store(s); close(ready) },
			OnRebuilt: func(version uint64) { c.copies.Rebuilt(n.ID, version) },
		})
		// However it ended, the process is gone with whatever it held.
		c.copies.Died(n.ID)
		c.mu.Lock()
		n.done, n.err = true, err
		c.mu.Unlock()
		if err != nil && !n.killed && c.ctx.Err() == nil {
			c.Note("%s returned: %v", n.ID, err)
		}
	})
	select {
	case <-ready:
		return n, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s did not join: %w", n.ID, ctx.Err())
	}
}

// machine and class are a node's machine and its class, with tiers.
func (c *Cluster) machine(n *Node) string {
	if c.cfg.Stage == 0 {
		return ""
	}
	return n.ID
}

func (c *Cluster) class(n *Node) tier.Class {
	if c.cfg.Stage == 0 {
		return tier.Reliable
	}
	return tierClass(n.Class)
}

// KillServer stops server id at once, as a SIGKILL (harsher: bytes in
// flight either way are lost, see simnet.Net.Crash).
func (c *Cluster) KillServer(id string) {
	n := c.node(id)
	if n == nil || n.Role != RoleServer {
		return
	}
	c.mu.Lock()
	n.killed = true
	c.mu.Unlock()
	// Dead in the account before the crash can fail its copies.
	c.copies.Died(id)
	c.Note("FAULT kill %s", id)
	c.net.Crash(id)
	n.stop()
}

// Drain gives node id an eviction notice with grace before its machine
// goes: a server hands its slots over and leaves the ring, a worker
// finishes its minibatch, records its progress and leaves. Neither is
// killed when the grace ends; Revoke does that.
func (c *Cluster) Drain(id string, grace time.Duration) {
	n := c.node(id)
	if n == nil {
		return
	}
	c.mu.Lock()
	n.leaving = true
	c.mu.Unlock()
	c.Note("FAULT notice to %s: drain within %v", id, grace)
	select {
	case n.notices <- evict.Notice{Source: "sim", Deadline: time.Now().Add(grace)}:
	default: // told already
	}
}

// StartWorker starts a worker of class under a new ID (a new host, and a
// new rank).
func (c *Cluster) StartWorker(class string) {
	c.mu.Lock()
	if c.stopping {
		c.mu.Unlock()
		return
	}
	i := len(c.workers)
	if class == "" && c.cfg.WorkerClass != nil {
		class = c.cfg.WorkerClass(i)
	}
	ctx, stop := context.WithCancel(c.ctx)
	w := &Node{ID: fmt.Sprintf("worker-%d", i), Class: class, Role: RoleWorker, stop: stop, notices: make(chan evict.Notice, 1)}
	c.workers = append(c.workers, w)
	c.live++
	c.mu.Unlock()
	c.Note("start %s", w.ID)
	c.goNode(func() {
		_, err := node.RunWorker(ctx, node.WorkerConfig{ID: w.ID, Coordinator: c.coordAddr, Logger: c.log.With("node", w.ID),
			Network: c.net.Host(w.ID), Notices: w.notices, Machine: c.machine(w), Class: c.class(w), Rejoins: node.DefaultRejoins},
			func(ctx context.Context, cl *ps.Client) (any, error) { return nil, c.workload.Run(ctx, c, w, cl) })
		c.mu.Lock()
		w.done, w.err = true, err
		c.live--
		c.mu.Unlock()
		c.results <- w
	})
}

// KillWorker stops worker id at once, and starts a replacement after
// replace (none if replace is negative).
func (c *Cluster) KillWorker(id string, replace time.Duration) {
	n := c.node(id)
	if n == nil || n.Role != RoleWorker {
		return
	}
	c.mu.Lock()
	n.killed = true
	c.mu.Unlock()
	c.Note("FAULT kill %s; replacement in %v", id, replace)
	c.net.Crash(id)
	n.stop()
	c.Replace(replace)
}

// Replace starts a new worker (of the configured class) after d, and
// counts it as pending meanwhile, so that training is not taken for
// finished; a negative d does nothing.
func (c *Cluster) Replace(d time.Duration) {
	if d < 0 {
		return
	}
	c.mu.Lock()
	c.pending++
	c.mu.Unlock()
	time.AfterFunc(d, func() {
		c.StartWorker("")
		c.mu.Lock()
		c.pending--
		c.mu.Unlock()
	})
}

// SlowWorker makes worker id compute factor times slower (1: normal).
func (c *Cluster) SlowWorker(id string, factor float64) {
	if n := c.node(id); n != nil {
		n.slow.Store(math.Float64bits(factor))
	}
}

// watchLayouts feeds every layout the coordinator publishes to Copies and
// the timeline.
func (c *Cluster) watchLayouts() {
	for v := uint64(0); ; {
		l, err := c.coord.Layout(c.ctx, v)
		if err != nil {
			return
		}
		v = l.Version
		e := c.book.Mark()
		c.mu.Lock()
		c.seen = append(c.seen, versionMark{l.Version, e})
		c.mu.Unlock()
		if err := c.copies.Layout(l); err != nil {
			c.Violate(KindBroken, "layout v%d: %v", l.Version, err)
		}
		c.followRewinds(l)
		var srv, join []string
		for _, s := range l.Servers {
			srv = append(srv, s.ID)
		}
		for _, s := range l.Joining {
			join = append(join, s.ID)
		}
		tiers := ""
		if l.Stage != 0 {
			// With tiers, the stage and the other roles: what a
			// schedule's stalls and losses depend on.
			tiers = fmt.Sprintf(" stage %d backup [%s] standby [%s]", l.Stage, serverIDs(l.Backup), serverIDs(l.Standby))
			if l.Switch != nil {
				tiers += fmt.Sprintf(" switch %d->%d", l.Switch.From, l.Switch.To)
			}
		}
		c.Note("layout v%d epoch %d: servers [%s] joining [%s] leaving [%s]%s workers %d finished %v",
			l.Version, l.Epoch, strings.Join(srv, " "), strings.Join(join, " "), strings.Join(l.Leaving, " "), tiers, l.Workers, l.Finished)
	}
}

// serverIDs joins the IDs of ss with spaces, for the timeline.
func serverIDs(ss []ring.Server) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return strings.Join(out, " ")
}

// awaitTraining waits until every worker has returned and no replacement
// is pending, replacing workers fenced out or failed, or until the time
// limit. It reports whether training finished.
func (c *Cluster) awaitTraining() bool {
	limit := time.NewTimer(c.cfg.TimeLimit)
	defer limit.Stop()
	for {
		c.mu.Lock()
		done := c.live == 0 && c.pending == 0
		c.mu.Unlock()
		if done {
			c.Note("training finished")
			return true
		}
		select {
		case w := <-c.results:
			c.workerReturned(w)
		case <-limit.C:
			c.Violate(KindStall, "not within %v of fake time: %s; goroutine stacks in %s", c.cfg.TimeLimit, c.stalled(), dumpStacks(c.cfg.Seed))
			return false
		}
	}
}

func (c *Cluster) workerReturned(w *Node) {
	c.mu.Lock()
	leaving := w.leaving
	c.mu.Unlock()
	switch {
	case w.err == nil:
		c.Note("%s finished", w.ID)
	case w.killed:
		c.Note("%s stopped: %v", w.ID, w.err)
	case errors.Is(w.err, node.ErrDrained):
		c.Note("%s drained", w.ID)
	case leaving && errors.Is(w.err, context.Canceled):
		// Its notice ran out before it drained (node.RunWorker stops the
		// job at the deadline): its machine is gone, as if killed.
		c.Note("%s stopped at its notice's deadline: %v", w.ID, w.err)
	case errors.Is(w.err, api.ErrLeaseLost):
		// Declared dead while alive (cut off from the coordinator) more
		// often than it joins again (node.DefaultRejoins): it stops, as a
		// real worker exits, and a new one takes its place.
		c.Note("%s fenced out: %v", w.ID, w.err)
		c.StartWorker("")
	default:
		c.Violate(KindFailed, "%s: %v", w.ID, w.err)
		c.mu.Lock()
		c.failed++
		again := c.failed <= maxFailedReplaced
		c.mu.Unlock()
		if again {
			c.StartWorker("")
		}
	}
}

// maxFailedReplaced bounds how many failed workers are replaced: a
// cluster that fails every worker at once must not start workers forever.
const maxFailedReplaced = 10

// stopWorkers stops every worker and waits for them: their pushes in
// flight stay unconfirmed.
func (c *Cluster) stopWorkers() {
	c.mu.Lock()
	c.stopping = true
	for _, w := range c.workers {
		w.stop()
	}
	live := c.live
	c.mu.Unlock()
	for ; live > 0; live-- {
		<-c.results
	}
}

// stalled describes what every live worker is doing, and each server's
// clock minimum (the slowest worker's clock that reads wait on).
func (c *Cluster) stalled() string {
	var out, mins []string
	c.mu.Lock()
	for _, w := range c.workers {
		if !w.done {
			st := "starting"
			if p := w.status.Load(); p != nil {
				st = *p
			}
			out = append(out, fmt.Sprintf("%s: %s", w.ID, st))
		}
	}
	for _, s := range c.servers {
		m := "-"
		if srv := s.srv.Load(); srv != nil {
			m = strconv.FormatInt(srv.Stats().MinClock, 10)
		}
		mins = append(mins, m)
	}
	c.mu.Unlock()
	out = append(out, fmt.Sprintf("clock minimum of every server started, killed ones too, in the order they started: %s", strings.Join(mins, " ")))
	return strings.Join(out, "; ")
}

// sleep waits d and reports true, or false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
