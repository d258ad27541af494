package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/process/evict"
	"github.com/terrace-ml/terrace/internal/server"
	"github.com/terrace-ml/terrace/ps"
)

// DefaultJoinTimeout bounds how long a node waits for its coordinator and
// peers before it gives up with an error.
const DefaultJoinTimeout = 30 * time.Second

// CoordinatorConfig configures RunCoordinator.
type CoordinatorConfig struct {
	Listen  string
	Options coord.Options
	Logger  *slog.Logger
	// Ready, when set, receives the coordinator once it listens.
	Ready func(c *coord.Coordinator, addr string)
	// Network is what the coordinator listens and dials on (TCP if nil); it
	// replaces Options.Network.
	Network transport.Network
	// Class is the class of the coordinator's machine: it runs only on
	// reliable machines (issue 11).
	Class tier.Class
}

// ErrTransientCoordinator refuses a coordinator on a transient machine.
var ErrTransientCoordinator = errors.New("the coordinator runs only on reliable machines")

// RunCoordinator serves a coordinator until ctx ends.
func RunCoordinator(ctx context.Context, cfg CoordinatorConfig) error {
	if cfg.Class == tier.Transient {
		return fmt.Errorf("coordinator: --class %s: %w", cfg.Class, ErrTransientCoordinator)
	}
	ln, err := transport.OrTCP(cfg.Network).Listen(cfg.Listen)
	if err != nil {
		return fmt.Errorf("coordinator: listen: %w", err)
	}
	cfg.Options.Logger = cfg.Logger
	cfg.Options.Network = cfg.Network
	c, err := coord.Open(cfg.Options)
	if err != nil {
		ln.Close()
		return err
	}
	if cfg.Ready != nil {
		cfg.Ready(c, ln.Addr().String())
	}
	return c.Serve(ctx, ln, cfg.Logger)
}

// ServerConfig configures RunServer.
type ServerConfig struct {
	ID          string
	Listen      string // data-plane address to listen on
	Advertise   string // address workers dial; the listener's address if empty
	Coordinator string
	JoinTimeout time.Duration
	Logger      *slog.Logger
	// Ready, when set, receives the server once it has joined.
	Ready func(s *server.Server)
	// Notices, when set, delivers an eviction notice (or SIGTERM): the
	// server then leaves the layout, so that the next servers of its
	// chains, which hold every acknowledged update, take its slots, and
	// exits once its peers have the new layout.
	Notices <-chan evict.Notice
	// Network is what the server listens and dials on (TCP if nil).
	Network transport.Network
	// Token returns the server's join token at each request (none if nil
	// or ""; api.Client.Token).
	Token func() string
	// OnRebuilt: see server.Options. The server reports each rebuild to
	// the coordinator too.
	OnRebuilt func(version uint64)
	// Metrics: see NodeMetrics.
	Metrics NodeMetrics
	// Machine and Class are the machine the server runs on and its class
	// (issue 11): in the join, the registration and the statistics.
	Machine string
	Class   tier.Class
}

// drainLinger is how long a departing server keeps answering (with
// refusals that make clients re-route) before it closes.
const drainLinger = 500 * time.Millisecond

// RunServer listens, joins the coordinator, and serves while following
// the published layout, until ctx ends.
func RunServer(ctx context.Context, cfg ServerConfig) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.JoinTimeout <= 0 {
		cfg.JoinTimeout = DefaultJoinTimeout
	}
	ln, err := transport.OrTCP(cfg.Network).Listen(cfg.Listen)
	if err != nil {
		return fmt.Errorf("server %s: listen: %w", cfg.ID, err)
	}
	defer ln.Close()
	addr := cfg.Advertise
	if addr == "" {
		addr = ln.Addr().String()
	}
	cc := api.NewClient(cfg.Coordinator, cfg.Network)
	cc.Token = cfg.Token
	metrics, err := cfg.Metrics.serve(ctx, cfg.Network, cc)
	if err != nil {
		return fmt.Errorf("server %s: %w", cfg.ID, err)
	}
	cc.Unreachable = unreachable(cfg.Logger, cfg.JoinTimeout)
	nctx, notices := beforeJoin(ctx, cfg.Notices)
	jctx, cancel := context.WithTimeout(nctx, cfg.JoinTimeout)
	defer cancel()
	if err := cc.WaitReachable(jctx); err != nil {
		if noticedBeforeJoin(jctx) {
			cfg.Logger.Warn("notice before joining: leaving, with nothing to hand off")
			return ErrDrained
		}
		return fmt.Errorf("server %s: %w", cfg.ID, err)
	}
	inc := newIncarnation()
	joined, err := cc.JoinAs(jctx, api.Join{Role: api.RoleServer, ID: cfg.ID, Addr: addr, Incarnation: inc, Machine: cfg.Machine, Class: cfg.Class})
	if err != nil {
		if noticedBeforeJoin(jctx) {
			cfg.Logger.Warn("notice before joining: leaving, with nothing to hand off")
			return ErrDrained
		}
		return fmt.Errorf("server %s: join: %w", cfg.ID, err)
	}
	cfg.Notices = notices()
	l := joined.Layout
	if l == nil {
		return fmt.Errorf("server %s: join: the coordinator sent no layout", cfg.ID)
	}
	reg := register(ctx, l, api.RoleServer, cfg.ID, inc, addr, machineLabels(cfg.Machine, cfg.Class), cfg.Network, cfg.Logger)
	defer reg.leave()
	report := func(what string, call func(ctx context.Context) error) { reportTo(ctx, cfg.Logger, what, call) }
	s := server.New(server.Options{ID: cfg.ID, Logger: cfg.Logger, Network: cfg.Network,
		Machine: cfg.Machine, Class: cfg.Class,
		// Before any synced report of the same rebuild (the server makes
		// them in this order, and each waits for its answer): the
		// coordinator then knows the new holders before a handoff it
		// completes takes the old ones off (docs/design/resilience.md,
		// "Slots that lost every copy").
		OnRebuilt: func(version uint64) {
			if cfg.OnRebuilt != nil {
				cfg.OnRebuilt(version)
			}
			report("rebuild", func(ctx context.Context) error { return cc.Rebuilt(ctx, cfg.ID, version) })
		},
		OnSynced: func(joiner string, version uint64) {
			report("joiner synced", func(ctx context.Context) error { return cc.Synced(ctx, cfg.ID, joiner, version) })
		},
		OnCheckpointed: func(seq uint64, err error) {
			report("checkpoint", func(ctx context.Context) error { return cc.Checkpointed(ctx, cfg.ID, seq, err) })
		},
		OnRestored: func(seq uint64, rewind int, err error) {
			report("restore", func(ctx context.Context) error { return cc.Restored(ctx, cfg.ID, seq, rewind, err) })
		},
		OnLoss: func(r server.LossReport) {
			rep := lossReport(cfg.ID, r)
			if err := reportLoss(ctx, cfg.Logger, time.Second, func(ctx context.Context) error { return cc.ReportLoss(ctx, rep) }); err != nil {
				cfg.Logger.Warn("could not report to the coordinator", "what", "loss", "err", err)
			}
		},
	})
	if err := s.Configure(l); err != nil {
		return err
	}
	if metrics != nil {
		metrics.MustRegister(s.Collector())
	}
	if cfg.Ready != nil {
		cfg.Ready(s)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 3)
	var end jobEnd
	end.see(l)
	var leaving atomic.Bool // a notice came: the layouts without it are its own doing
	go func() { errc <- s.Serve(sctx, ln) }()
	go func() { errc <- followLayout(sctx, cc, s, l, cfg.ID, cfg.Logger, &end, &leaving) }()
	if cfg.Notices != nil {
		go func() {
			select {
			case n, ok := <-cfg.Notices:
				if ok {
					leaving.Store(true)
					if end.shutdown.Load() {
						// The cluster ends with its job: the server exits
						// by itself, and nothing is to move.
						cfg.Logger.Info("the cluster ends with its job: leaving at once", "source", n.Source)
						errc <- ErrDrained
						return
					}
					errc <- drainServer(sctx, cc, s, cfg, n, &end)
				}
			case <-sctx.Done():
			}
		}()
	}
	err = <-errc
	if errors.Is(err, errClusterDone) {
		cfg.Logger.Info("the cluster's job is done and the cluster ends with it: exiting")
		return nil
	}
	if ctx.Err() != nil && !errors.Is(err, ErrDrained) {
		return nil
	}
	return err
}

// reportTo makes one report to the coordinator (what names it in the
// log) within 10 s. One cut short because the server is stopping (ctx
// ended) is not news: a refused train --resume tore its cluster down as
// the servers restored the checkpoint, and each warned "context
// canceled".
func reportTo(ctx context.Context, log *slog.Logger, what string, call func(ctx context.Context) error) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := call(sctx); err != nil && ctx.Err() == nil {
		log.Warn("could not report to the coordinator", "what", what, "err", err)
	}
}

func drainServer(ctx context.Context, cc *api.Client, s *server.Server, cfg ServerConfig, n evict.Notice, end *jobEnd) error {
	cfg.Logger.Warn("eviction notice: leaving the layout", "source", n.Source, "deadline", n.Deadline)
	dctx, cancel := context.WithDeadline(ctx, n.Deadline)
	defer cancel()
	// Before the job's first table the server holds nothing either: it
	// waited the client's 30 s for a coordinator gone, then exited 1.
	if (end.done.Load() || end.noTables.Load()) && coordinatorGone(dctx, cc) {
		cfg.Logger.Warn("the job is done, or holds no table yet, and the coordinator does not answer: leaving without a handoff", "waited", afterJobReach)
		return ErrDrained
	}
	if !end.done.Load() && !end.noTables.Load() {
		go warnUnanswered(dctx, cc, cfg.Logger, n.Deadline)
	}
	l, err := leaveRing(dctx, cc, cfg, n, end)
	if errors.Is(err, errCoordinatorGone) {
		cfg.Logger.Warn("the job is done and the coordinator does not answer: leaving without a handoff", "waited", afterJobReach)
		return ErrDrained
	}
	if err == nil && l.LastAfterJob(cfg.ID) {
		cfg.Logger.Warn("the last server on the ring leaves after the job: the job's model goes with it (export it, or take a checkpoint, before stopping the last server)")
		return ErrDrained
	}
	if err == nil && end.noTables.Load() && onlyOrOff(l.Servers, cfg.ID) {
		// The coordinator let the last server go before the job's
		// first table (nothing to hand off): a server that joins takes
		// its place.
		cfg.Logger.Info("the last server on the ring holds no table yet: leaving at once")
		return ErrDrained
	}
	if err == nil && l.JobDone && l.Shutdown {
		cfg.Logger.Info("the cluster ends with its job: leaving at once")
		return ErrDrained
	}
	if err != nil {
		if errors.Is(err, api.ErrLastServer) && end.noTables.Load() {
			// Its slots hold no table yet: nothing is lost, and serving
			// on until the deadline kept a forming cluster's server
			// 30 s after SIGTERM, to exit 1.
			cfg.Logger.Info("the last server on the ring holds no table yet: leaving at once")
			return ErrDrained
		}
		if errors.Is(err, api.ErrLastServer) && dctx.Err() == nil {
			// Leaving now would take every slot with it: serve on while
			// the machine lasts, so that the job goes on until then.
			cfg.Logger.Error("the last server on the ring cannot drain: serving until the notice's deadline", "deadline", n.Deadline)
			<-dctx.Done()
			if ctx.Err() != nil {
				return nil
			}
			if end.done.Load() && leftAfterJob(ctx, cc, cfg, n) {
				return ErrDrained
			}
			return fmt.Errorf("server %s: the last server on the ring left at its notice's deadline with every slot it held", cfg.ID)
		}
		return fmt.Errorf("server %s: drain: %w", cfg.ID, err)
	}
	// The heads (this one too) ship the slots this server holds to the
	// servers that will hold them; the coordinator then takes it off the
	// ring. Wait for that, then answer stragglers' requests with refusals
	// for a moment before closing.
	for s.OnRing() && dctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if s.OnRing() {
		cfg.Logger.Error("drain deadline passed before the handoff finished; leaving anyway (with replication 1 this server's keys are lost)")
	}
	select {
	case <-time.After(drainLinger):
	case <-dctx.Done():
	}
	return ErrDrained
}

// leftAfterJob asks, at its notice's deadline, that the last server on
// the ring leave as the last one after the job does, the job having ended
// while it served out its notice: the coordinator then says that it left
// with the model. It exited 1 unannounced, and the status showed it
// serving every slot for good.
func leftAfterJob(ctx context.Context, cc *api.Client, cfg ServerConfig, n evict.Notice) bool {
	lctx, cancel := context.WithTimeout(ctx, afterJobReach)
	defer cancel()
	l, err := cc.DrainServer(lctx, cfg.ID, api.Notice{Source: n.Source, Detail: n.Detail, Deadline: time.Now().Add(afterJobReach)})
	if err != nil || !l.LastAfterJob(cfg.ID) {
		return false
	}
	cfg.Logger.Warn("the job ended while the last server on the ring served out its notice: it leaves as after the job, and the job's model goes with it")
	return true
}

// warnUnanswered says, once, that the coordinator does not answer a drain
// during the job: the server waits for it until its notice's deadline,
// and said nothing meanwhile (SIGTERMed after its coordinator stopped, it
// was silent for its 30 s grace, then exited 1).
func warnUnanswered(ctx context.Context, cc *api.Client, log *slog.Logger, deadline time.Time) {
	rctx, cancel := context.WithTimeout(ctx, drainReach)
	defer cancel()
	if cc.WaitReachable(rctx) != nil && ctx.Err() == nil {
		log.Warn("the coordinator does not answer: waiting for it to take this server's slots until the notice's deadline (a coordinator started again in time does); then the server leaves with them", "deadline", deadline)
	}
}

// drainReach is how long a drain during the job waits for the coordinator
// before it says that it waits (warnUnanswered).
const drainReach = time.Second

// onlyOrOff reports whether servers, a ring, is id alone or lacks it.
func onlyOrOff(servers []ring.Server, id string) bool {
	return len(servers) == 1 && servers[0].ID == id || !slices.ContainsFunc(servers, func(s ring.Server) bool { return s.ID == id })
}

// afterJobReach bounds the wait for a coordinator after the job, before
// a server leaves without a handoff: a failover's new leader answers
// within it.
const afterJobReach = 5 * time.Second

// coordinatorGone reports whether no coordinator answers within
// afterJobReach while ctx lasts. After the job it may be gone for good
// (stopped first), and without it nobody takes the slots: a drain would
// wait out the client's 30 s retry budget, then exit 1.
func coordinatorGone(ctx context.Context, cc *api.Client) bool {
	rctx, cancel := context.WithTimeout(ctx, afterJobReach)
	defer cancel()
	return cc.WaitReachable(rctx) != nil && ctx.Err() == nil
}

// errCoordinatorGone: after the job, the coordinator stopped answering
// while this server waited to leave.
var errCoordinatorGone = errors.New("the job is done and the coordinator does not answer")

// leaveRing asks the coordinator to let the server leave. After the job a
// refusal as the last server means another server is draining to it: it
// asks again until that one is off the ring and it is the last itself
// (Layout.LastAfterJob), which the coordinator records as such. A
// coordinator gone meanwhile (SIGTERMed with its servers) answers no
// more: errCoordinatorGone once coordinatorGone says so, where the next
// ask waited out the client's 30 s retry budget, then exited 1.
func leaveRing(ctx context.Context, cc *api.Client, cfg ServerConfig, n evict.Notice, end *jobEnd) (*layout.Layout, error) {
	for {
		l, err := cc.DrainServer(ctx, cfg.ID, api.Notice{Source: n.Source, Detail: n.Detail, Deadline: n.Deadline})
		if !errors.Is(err, api.ErrLastServer) || !end.done.Load() || end.noTables.Load() {
			return l, err
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return l, err
		}
		if coordinatorGone(ctx, cc) {
			return nil, errCoordinatorGone
		}
	}
}

// followLayout installs every new layout the coordinator publishes,
// after first (installed already). A coordinator that stays unreachable
// for longer than the join timeout does not stop the server: its data
// plane goes on serving the last layout. A server the layouts stop naming
// without a drain (its own, or asked of the coordinator) was taken out as
// failed while it ran (paused, starved or cut off for longer than the
// failure timeout): it owns nothing and serves nothing from then on,
// which it says once, where it went on silently as if it served (status
// showed it dead).
func followLayout(ctx context.Context, cc *api.Client, s *server.Server, first *layout.Layout, id string, log *slog.Logger, end *jobEnd, leaving *atomic.Bool) error {
	version, was := first.Version, inCluster(first, id)
	for ctx.Err() == nil {
		l, err := cc.Layout(ctx, version)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("layout poll failed; retrying", "err", err)
			select {
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		if err := s.Configure(l); err != nil {
			return err
		}
		version = l.Version
		if end.see(l) {
			return errClusterDone
		}
		if takenOut(was, l, id, leaving.Load()) {
			log.Warn("taken out of the cluster as failed while running (paused, starved or cut off for longer than the failure timeout): this server owns and serves nothing now; stop it and start it again to join as a new server", "server", id, "epoch", l.Epoch)
		}
		was = inCluster(l, id)
	}
	return nil
}

// inCluster reports whether layout l names server id in a role other
// than leaving: on the ring, joining, on standby or as a BackupPS.
func inCluster(l *layout.Layout, id string) bool {
	return !slices.Contains(l.Leaving, id) && names(l, id)
}

// names reports whether layout l names server id in any role.
func names(l *layout.Layout, id string) bool {
	return slices.ContainsFunc(l.AllServers(), func(s ring.Server) bool { return s.ID == id })
}

// takenOut reports whether layout l took server id out of the cluster as
// failed: the layout before had it in the cluster (was), l does not name
// it at all, and it had no notice (leaving). A server that leaves is
// first Leaving (a drain, its own or asked of the coordinator's API),
// then gone; a failed one is just gone.
func takenOut(was bool, l *layout.Layout, id string, leaving bool) bool {
	return was && !leaving && !names(l, id)
}

// Job is a worker's work: it trains through the client and returns a
// report (any JSON-encodable value).
type Job func(ctx context.Context, c *ps.Client) (any, error)

// WorkerConfig configures RunWorker.
type WorkerConfig struct {
	ID          string
	Coordinator string
	JoinTimeout time.Duration
	Logger      *slog.Logger
	// Notices, when set, delivers an eviction notice (or SIGTERM): the
	// worker then drains, finishing its minibatch, recording its
	// partition's progress and leaving, so its work moves on intact.
	Notices <-chan evict.Notice
	// Network is what the worker dials on (TCP if nil).
	Network transport.Network
	// Token returns the worker's join token at each request (none if nil
	// or ""; api.Client.Token).
	Token func() string
	// Metrics: see NodeMetrics.
	Metrics NodeMetrics
	// Machine and Class are the machine the worker runs on and its class
	// (issue 11).
	Machine string
	Class   tier.Class
	// PeerAddr is where the worker listens for its peers' progress
	// messages, announced in its join (none if empty;
	// docs/design/stragglers.md).
	PeerAddr string
	// Rejoins is how many times the worker joins again, as a new worker,
	// after the coordinator declared it dead while it ran (a pause or
	// starvation longer than the failure timeout; see RunWorker); 0: it
	// returns the error instead.
	Rejoins int
}

// DefaultRejoins is `terrace worker`'s WorkerConfig.Rejoins: enough for
// a worker on a busy host to ride out its pauses, few enough that one the
// coordinator can never hear from stops.
const DefaultRejoins = 10

// noticeTimeout bounds telling the coordinator of a worker's notice.
const noticeTimeout = 2 * time.Second

// ErrDrained is returned by RunWorker and RunServer after a drained
// departure; the command exits 0 on it.
var ErrDrained = errors.New("node drained")

// ErrNotFormed is a worker's error when its cluster did not form (every
// server and worker its coordinator expects joined) within its join
// timeout.
var ErrNotFormed = errors.New("the cluster did not form")

// RunWorker joins the coordinator, connects to the servers, runs job and
// reports its result to the coordinator.
//
// A worker the coordinator declared dead while it was alive (stopped,
// starved of the processor or cut off for longer than the failure
// timeout) has lost its rank: its leases went to the others, its pushes
// are fenced. Up to cfg.Rejoins times it then joins again under a new
// incarnation, which the coordinator gives the next rank, and runs job
// afresh from its first request for work; the work it lost is counted
// where any dead worker's is. Before this, such a worker exited 1 and the
// job went on one worker short.
func RunWorker(ctx context.Context, cfg WorkerConfig, job Job) (any, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.JoinTimeout <= 0 {
		cfg.JoinTimeout = DefaultJoinTimeout
	}
	cc := api.NewClient(cfg.Coordinator, cfg.Network)
	cc.Token = cfg.Token
	metrics, err := cfg.Metrics.serve(ctx, cfg.Network, cc)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", cfg.ID, err)
	}
	cc.Unreachable = unreachable(cfg.Logger, cfg.JoinTimeout)
	for rejoin := 0; ; rejoin++ {
		rep, err := runWorker(ctx, cfg, cc, metrics, job)
		if !errors.Is(err, api.ErrDeclaredDead) || rejoin >= cfg.Rejoins || ctx.Err() != nil {
			return rep, err
		}
		cfg.Logger.Warn("declared dead while running (paused or starved longer than the failure timeout): joining again as a new worker",
			"rejoin", rejoin+1, "of", cfg.Rejoins, "err", err)
	}
}

// fullRetry is how often a worker refused as one too many asks again
// while the cluster forms.
const fullRetry = time.Second

// joinWorker joins as j, asking again while the cluster refuses it as one
// worker too many (api.ErrFull): that is only while it forms, and a
// worker that died before it formed (SIGKILL or Ctrl-C while it waited
// for servers) keeps its rank until then, when it is found dead and a
// worker may join as another rank. The replacement exited 1 on "full".
// ctx (the join timeout) bounds the wait, as it bounds the wait for the
// cluster to form.
func joinWorker(ctx context.Context, cc *api.Client, j api.Join, log *slog.Logger) (api.Joined, error) {
	said := false
	for {
		joined, err := cc.JoinAs(ctx, j)
		if !errors.Is(err, api.ErrFull) {
			return joined, err
		}
		if !said {
			log.Warn("the forming cluster has every worker it expects: waiting for it to form, then joining as one more", "err", err)
			said = true
		}
		select {
		case <-ctx.Done():
			return joined, err
		case <-time.After(fullRetry):
		}
	}
}

// runWorker is one membership of RunWorker's: join, connect, run, report.
func runWorker(ctx context.Context, cfg WorkerConfig, cc *api.Client, metrics *prometheus.Registry, job Job) (any, error) {
	nctx, notices := beforeJoin(ctx, cfg.Notices)
	jctx, cancel := context.WithTimeout(nctx, cfg.JoinTimeout)
	defer cancel()
	if err := cc.WaitReachable(jctx); err != nil {
		if noticedBeforeJoin(jctx) {
			cfg.Logger.Warn("notice before joining: leaving, with nothing to hand off")
			return nil, ErrDrained
		}
		return nil, fmt.Errorf("worker %s: %w", cfg.ID, err)
	}
	inc := newIncarnation()
	joined, err := joinWorker(jctx, cc, api.Join{Role: api.RoleWorker, ID: cfg.ID, Addr: cfg.PeerAddr, Incarnation: inc, Machine: cfg.Machine, Class: cfg.Class}, cfg.Logger)
	rank := joined.Rank
	if err != nil {
		if noticedBeforeJoin(jctx) {
			cfg.Logger.Warn("notice before joining: leaving, with nothing to hand off")
			return nil, ErrDrained
		}
		return nil, fmt.Errorf("worker %s: join: %w", cfg.ID, err)
	}
	// From now on every request names the job joined: should this worker
	// outlive its job (declared dead, still running), the next job's
	// holder of its rank is not mistaken for it.
	if joined.Layout != nil {
		cc.SetJob(joined.Layout.Job)
	}
	// Connect waits for the cluster to form (every server joined), which
	// may take long: a notice meanwhile still ends the wait. It was watched
	// only from here on, so a worker waiting for an absent server ignored
	// SIGTERM for its whole join timeout and then exited 1.
	c, err := ps.Connect(jctx, cc, ps.Options{Rank: rank, NodeID: cfg.ID, Logger: cfg.Logger, Network: cfg.Network, ServerWait: cfg.JoinTimeout})
	cfg.Notices = notices()
	if err != nil {
		if noticedBeforeJoin(jctx) {
			// Its rank stays: the same worker started again takes it
			// back, and if none does, the formed cluster finds it dead
			// (a worker that left is not given work again).
			cfg.Logger.Warn("notice before the cluster formed: leaving, with nothing to hand off")
			return nil, ErrDrained
		}
		if errors.Is(jctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil && errors.Is(err, ps.ErrNoServer) {
			// The cluster formed: its servers are what is missing. It
			// said "the cluster did not form ... waits for every server
			// and worker its coordinator expects" (a whole cluster
			// SIGKILLed, its coordinator started again on its
			// --etcd-dir, new servers joining, the last old one gone).
			return nil, fmt.Errorf("worker %s: no server of the cluster's ring answered within the join timeout (%v, --join-timeout): the cluster formed, but the servers holding its slots are unreachable (terrace status; if they are gone, every copy of the model went with them, and the way on is a checkpoint: coordinator --resume): %w",
				cfg.ID, cfg.JoinTimeout, err)
		}
		if errors.Is(jctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			// It said only "ps: waiting for the cluster layout: ...
			// context deadline exceeded".
			return nil, fmt.Errorf("worker %s: %w within the join timeout (%v, --join-timeout): it waits for every server and worker its coordinator expects (terrace status lists who joined): %w",
				cfg.ID, ErrNotFormed, cfg.JoinTimeout, err)
		}
		return nil, fmt.Errorf("worker %s: %w", cfg.ID, err)
	}
	defer c.Close()
	if metrics != nil {
		col := c.Collector()
		metrics.MustRegister(col)
		defer metrics.Unregister(col) // a rejoin registers its new client's
	}
	reg := register(ctx, c.Layout(), api.RoleWorker, cfg.ID, inc, "", machineLabels(cfg.Machine, cfg.Class), cfg.Network, cfg.Logger)
	defer reg.leave()
	jobCtx, stopJob := context.WithCancel(ctx)
	defer stopJob()
	if cfg.Notices != nil {
		go func() {
			select {
			case n, ok := <-cfg.Notices:
				if !ok {
					return
				}
				cfg.Logger.Warn("eviction notice: draining", "source", n.Source, "deadline", n.Deadline, "detail", n.Detail)
				c.Drain()
				// For the timeline; the drain goes on without it.
				nctx, cancel := context.WithTimeout(jobCtx, noticeTimeout)
				// A drain that ended first canceled it: nothing to say.
				if err := cc.Notice(nctx, api.Notice{Role: api.RoleWorker, ID: cfg.ID, Source: n.Source, Detail: n.Detail, Deadline: n.Deadline}); err != nil && jobCtx.Err() == nil {
					cfg.Logger.Warn("could not tell the coordinator of the notice", "err", err)
				}
				cancel()
				// The loop stops at its next minibatch; past the deadline
				// the worker stops anyway.
				t := time.NewTimer(time.Until(n.Deadline))
				defer t.Stop()
				select {
				case <-t.C:
					stopJob()
				case <-jobCtx.Done():
				}
			case <-jobCtx.Done():
			}
		}()
	}
	rep, err := job(jobCtx, c)
	if err != nil && !errors.Is(err, api.ErrDeclaredDead) && !errors.Is(err, ps.ErrDrained) && ctx.Err() == nil && !c.Draining() {
		// The job may fail on what being declared dead did first (a
		// server fencing the rank's pushes): ask the coordinator.
		hctx, cancel := context.WithTimeout(ctx, noticeTimeout)
		if herr := cc.Heartbeat(hctx, rank, 0); errors.Is(herr, api.ErrDeclaredDead) {
			err = fmt.Errorf("%w (%w)", herr, err)
		}
		cancel()
	}
	if errors.Is(err, api.ErrDeclaredDead) && c.Draining() {
		// Told to leave (SIGTERM, a notice), and found dead on the way:
		// its leases went to others already, nothing is left to hand off.
		cfg.Logger.Warn("drained: declared dead meanwhile, its leases already handed on", "err", err)
		return nil, ErrDrained
	}
	if errors.Is(err, ps.ErrDrained) && errors.Is(err, ps.ErrNoServer) {
		// Told to leave while no server of the ring answered: nothing
		// sent since the lease's last progress record can be
		// acknowledged. It exited 1 at its wait's end, unannounced.
		cfg.Logger.Warn("draining while no server of the ring answers: the pushes since each lease's last progress record are not acknowledged; the leases go back to the pool from their recorded offsets, and those rows are trained again by whoever takes them", "err", err)
	}
	if errors.Is(err, ps.ErrDrained) {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if lerr := c.Leave(lctx); lerr != nil {
			return nil, fmt.Errorf("worker %s: drained, but leaving failed: %w", cfg.ID, lerr)
		}
		cfg.Logger.Warn("drained: progress recorded, leases returned")
		return nil, ErrDrained
	}
	if err != nil && errors.Is(err, ps.ErrNoServer) {
		// Its ring's servers stopped answering mid-job and none came back
		// within its patience. It said only "context deadline exceeded
		// (after ps: server s0: no connection)", after a fixed 10 s.
		return nil, fmt.Errorf("worker %s (rank %d): no server of the cluster's ring answered within the join timeout (%v, --join-timeout), which is also how long a running worker waits for its servers: terrace status says which are down; if they are gone, every copy of the model went with them, and the way on is a checkpoint (coordinator --resume, or --on-copies-lost resume while the cluster runs), then start this worker again: %w",
			cfg.ID, rank, cfg.JoinTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("worker %s (rank %d): %w", cfg.ID, rank, err)
	}
	if rep == nil {
		rep = struct{}{}
	}
	if err := cc.Report(ctx, rank, rep); err != nil {
		return rep, fmt.Errorf("worker %s: report: %w", cfg.ID, err)
	}
	return rep, nil
}
