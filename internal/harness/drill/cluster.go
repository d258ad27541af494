package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// ErrUnknownMachine: a Cluster call named a machine it never started.
var ErrUnknownMachine = errors.New("drill: no such machine")

// drained marks a node the cluster asked to leave (SIGTERM): it drains
// and exits 0, which is not a failure.
const drained Action = "drain"

// ClusterConfig configures a Cluster.
type ClusterConfig struct {
	// Binary is the terrace executable (this one if empty); RunDir
	// receives a log per node and the workers' reports (a temporary
	// directory if empty).
	Binary, RunDir string
	// Servers and Workers are what the coordinator waits for before the
	// job starts: the machines of the first plan.
	Servers, Workers  int
	WorkersPerMachine int
	// Partitions is the job's data partitions (the coordinator's default,
	// 4 per worker of the formation, if 0): machines that join later
	// share these, so a cluster that grows needs them sized for its
	// largest footprint.
	Partitions int
	// Stage is the coordinator's --stage (1, 2 or 3), SyncInterval its
	// --sync-interval (its default if 0).
	Stage        string
	SyncInterval time.Duration
	// WorkerCommand (DefaultWorkerCommand if nil) and WorkerArgs (the
	// application's flags) as in Config.
	WorkerCommand []string
	WorkerArgs    []string
	LogLevel      string
	// Out receives the run directory and the machines' comings and goings.
	Out io.Writer
	// StartTimeout bounds the wait for the coordinator (1 minute if 0).
	StartTimeout time.Duration
	// Replication is the coordinator's --replication (k; 2, or 1 with one
	// server, if 0). LinkMbps, when set, emulates each machine's link as
	// Tiers.LinkMbps does. Audit, when set, runs the workers with the
	// drill's audit and its logs (as `train --processes` does), which
	// AuditLogs reads.
	Replication int
	LinkMbps    *tier.ByClass
	Audit       *Audit
	// CoordArgs are further coordinator flags (a real replay's
	// checkpoints: --checkpoint-dir, --checkpoint-every, --resume).
	CoordArgs []string
}

// Cluster is an open-ended set of machines of two classes over one
// running coordinator, each machine a server and WorkersPerMachine
// workers started as processes by the drill's supervisor: the machines
// of a local provider (internal/market/localprov), started, noticed,
// killed and drained one by one as a market decides, rather than on a
// schedule. It is safe for concurrent use. Close stops every process;
// on Linux the kernel stops them if this process is killed.
type Cluster struct {
	mu   sync.Mutex
	d    *drill
	logf *os.File
	// finished is closed once a worker has trained to the end and no
	// worker that was not stopped on purpose is still running.
	finished   chan struct{}
	isFinished bool
	passes     int // the last pass rank 0 announced
	failures   []error
	loopDone   chan struct{}
	stop       chan struct{}
	closeOnce  sync.Once
	looping    bool // loop runs (set before it starts)
	// training is set at the first acknowledged push: the cluster has
	// formed. Until then the coordinator takes no node beyond those it
	// forms with, so machines started before are pending: named, and
	// started at the first acknowledged push (as the drill's --add
	// starts machines only once training runs).
	training bool
	pending  []pendingMachine
	trained  chan struct{} // closed when training is set
	// next numbers each class's machines: a name is never reused, even
	// for a machine dropped before it started, whose later events must
	// not reach another machine.
	next map[Role]int
	// peak is the most machines with a process running at once, counted
	// at each start (a machine draining or not yet reaped counts).
	peak int
}

type pendingMachine struct {
	name  string
	class Role
	i     int
}

// StartCluster starts the coordinator and returns once it listens.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Servers < 1 || cfg.Workers < 1 {
		return nil, fmt.Errorf("%w: a cluster needs a server and a worker at the start; got %d and %d", ErrBadConfig, cfg.Servers, cfg.Workers)
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("drill: finding this executable: %w", err)
		}
		cfg.Binary = exe
	}
	var err error
	if cfg.RunDir, err = prepareRunDir(cfg.RunDir, "terrace-cluster-"); err != nil {
		return nil, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = time.Minute
	}
	logf, err := os.Create(filepath.Join(cfg.RunDir, "drill.log"))
	if err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	dc := Config{Binary: cfg.Binary, RunDir: cfg.RunDir, Servers: cfg.Servers, Workers: cfg.Workers,
		WorkerCommand: cfg.WorkerCommand, WorkerArgs: cfg.WorkerArgs, LogLevel: cfg.LogLevel, Out: cfg.Out, Audit: cfg.Audit,
		Tiers: &Tiers{WorkersPerMachine: cfg.WorkersPerMachine, Stage: cfg.Stage, SyncInterval: cfg.SyncInterval, LinkMbps: cfg.LinkMbps}}
	if dc.WorkerCommand == nil {
		dc.WorkerCommand = DefaultWorkerCommand
	}
	if dc.LogLevel == "" {
		dc.LogLevel = "warn"
	}
	// started dates the faults the cluster reports: from its start.
	d := &drill{cfg: dc, machines: map[Role]int{}, log: slog.New(slog.NewTextHandler(logf, nil)), rep: &Report{RunDir: cfg.RunDir, Faults: []Fault{}}, started: time.Now()}
	c := &Cluster{d: d, logf: logf, finished: make(chan struct{}), loopDone: make(chan struct{}), stop: make(chan struct{}), trained: make(chan struct{}), next: map[Role]int{}}
	fmt.Fprintf(cfg.Out, "terrace: cluster run directory %s (a log per node)\n", cfg.RunDir)
	d.sup = newSupervisor(cfg.Binary, cfg.RunDir, d.interesting)
	if err := c.startCoordinator(ctx, cfg); err != nil {
		c.Close()
		return nil, err
	}
	c.looping = true
	go c.loop()
	return c, nil
}

func (c *Cluster) startCoordinator(ctx context.Context, cfg ClusterConfig) error {
	d := c.d
	replication := min(2, cfg.Servers)
	if cfg.Replication > 0 {
		replication = cfg.Replication
	}
	args := append([]string{"coordinator", "--listen", "127.0.0.1:0", "--etcd-dir", filepath.Join(cfg.RunDir, "etcd"),
		"--servers", strconv.Itoa(cfg.Servers), "--workers", strconv.Itoa(cfg.Workers),
		"--partitions", strconv.Itoa(cfg.Partitions), "--replication", strconv.Itoa(replication)}, d.cfg.Tiers.coordArgs()...)
	args = append(args, cfg.CoordArgs...)
	p, err := d.sup.start("coordinator", Coordinator, args...)
	if err != nil {
		return err
	}
	by := time.NewTimer(cfg.StartTimeout)
	defer by.Stop()
	if err := d.awaitCoordinator(ctx, p, by.C, cfg.StartTimeout); err != nil {
		return err
	}
	return nil
}

// loop reads the nodes' lines and exits until Close.
func (c *Cluster) loop() {
	defer close(c.loopDone)
	for {
		select {
		case l := <-c.d.sup.lines:
			c.mu.Lock()
			if l.text == MarkerFirstAck && !c.training {
				c.training = true
				c.startPending()
				close(c.trained)
			}
			if s, ok := strings.CutPrefix(l.text, progressMarker); ok {
				if k, _, ok := strings.Cut(strings.TrimSpace(s), "/"); ok {
					if n, err := strconv.Atoi(k); err == nil && n > c.passes {
						c.passes = n
					}
				}
			}
			c.d.handle(l)
			c.mu.Unlock()
		case p := <-c.d.sup.exits:
			c.mu.Lock()
			c.exited(p)
			c.mu.Unlock()
		case <-c.stop:
			return
		}
	}
}

// exited notes a node's exit (under c.mu): a failure if nothing stopped
// it and it did not finish, and the job's end once every worker that
// still counts has exited and one of them finished.
func (c *Cluster) exited(p *proc) {
	d := c.d
	d.log.Info("exited", "node", p.name, "err", p.waitErr, "fault", p.faulted)
	p.handled = true
	if p.faulted == "" && (p.role != Worker || d.workerReport(p) == nil) {
		c.failures = append(c.failures, fmt.Errorf("%w: %s exited (%v) though nothing stopped it; see %s%s", ErrNodeFailed, p.name, exitString(p.waitErr), p.log, excerpt(p.log)))
	}
	if c.isFinished {
		return
	}
	anyDone, live := false, false
	for _, w := range d.workers {
		switch {
		case d.workerReport(w) != nil:
			anyDone = true
		case !w.done() && w.faulted == "":
			live = true
		}
	}
	if anyDone && !live {
		c.isFinished = true
		close(c.finished)
	}
}

// Finished is closed once the job has trained to the end: a worker
// finished and every worker not stopped on purpose has exited.
func (c *Cluster) Finished() <-chan struct{} { return c.finished }

// Training is closed at the first acknowledged push: the cluster has
// formed and takes new machines at once.
func (c *Cluster) Training() <-chan struct{} { return c.trained }

// Passes is the last pass rank 0 reported finished.
func (c *Cluster) Passes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.passes
}

// Err joins the failures seen so far: nodes that exited though nothing
// stopped them.
func (c *Cluster) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.failures...)
}

// StartMachine starts a machine of class (Reliable or Transient): its
// server and workers, each with --machine and --class. It returns the
// machine's name. The first Servers machines form the cluster; a machine
// started after them but before training runs waits for it (pending).
func (c *Cluster) StartMachine(class Role) (string, error) {
	if class != Reliable && class != Transient {
		return "", fmt.Errorf("%w: class %q", ErrBadConfig, class)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.next[class]
	c.next[class]++
	name := fmt.Sprintf("%s-%d", class, i)
	if !c.training && c.started() >= c.d.cfg.Servers {
		c.pending = append(c.pending, pendingMachine{name, class, i})
		fmt.Fprintf(c.d.cfg.Out, "terrace: machine %s waits for the cluster to form\n", name)
		return name, nil
	}
	if err := c.d.startMachine(class, i); err != nil {
		return "", err
	}
	c.countRunning()
	fmt.Fprintf(c.d.cfg.Out, "terrace: machine %s started\n", name)
	return name, nil
}

func (c *Cluster) started() int { return c.d.machines[Reliable] + c.d.machines[Transient] }

// countRunning raises peak to the machines with a process running now
// (under c.mu).
func (c *Cluster) countRunning() {
	running := map[string]bool{}
	for _, p := range c.d.sup.procs {
		if p.machine != "" && !p.done() {
			running[p.machine] = true
		}
	}
	c.peak = max(c.peak, len(running))
}

// Peak is the most machines that had a process running at once: what
// the host ran, whatever the market held.
func (c *Cluster) Peak() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}

// startPending starts the machines that waited for training (under c.mu).
func (c *Cluster) startPending() {
	for _, m := range c.pending {
		if err := c.d.startMachine(m.class, m.i); err != nil {
			c.failures = append(c.failures, fmt.Errorf("start machine %s: %w", m.name, err))
			continue
		}
		c.countRunning()
		fmt.Fprintf(c.d.cfg.Out, "terrace: machine %s started\n", m.name)
	}
	c.pending = nil
}

// dropPending forgets a machine that never started (under c.mu).
func (c *Cluster) dropPending(machine string) bool {
	for i, m := range c.pending {
		if m.name == machine {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			return true
		}
	}
	return false
}

// Notice sends every node of machine the eviction notice of the drill's
// --evict (its eviction endpoint, or SIGTERM if it announced none).
func (c *Cluster) Notice(machine string) error { return c.hitMachine(machine, Evict) }

// Kill SIGKILLs every node of machine: it is gone.
func (c *Cluster) Kill(machine string) error { return c.hitMachine(machine, Kill) }

// Drain asks every node of machine to leave (SIGTERM): each drains and
// exits 0.
func (c *Cluster) Drain(machine string) error { return c.hitMachine(machine, drained) }

func (c *Cluster) hitMachine(machine string, a Action) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropPending(machine) {
		return nil // it never started: nothing to stop
	}
	found := false
	var errs []error
	for _, p := range c.d.sup.procs {
		if p.machine != machine {
			continue
		}
		found = true
		if p.done() || (p.faulted == a) || p.faulted == Kill {
			continue
		}
		if a == drained {
			if p.faulted == "" {
				p.faulted = drained
			}
			if _, err := terminate(p.cmd.Process); err != nil {
				errs = append(errs, fmt.Errorf("drain %s: %w", p.name, err))
			}
			continue
		}
		before := len(c.d.rep.Faults)
		c.d.hit(Planned{Action: a, Role: p.class}, p)
		if f := c.d.rep.Faults; len(f) > before && strings.Contains(f[len(f)-1].Note, "failed") {
			errs = append(errs, fmt.Errorf("%s %s: %s", a, p.name, f[len(f)-1].Note))
		}
	}
	if !found {
		return fmt.Errorf("%w: %s", ErrUnknownMachine, machine)
	}
	return errors.Join(errs...)
}

// Metrics returns the test metrics the workers that finished reported,
// rank 0's first (it evaluates after every pass).
func (c *Cluster) Metrics() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best map[string]float64
	bestRank := -1
	for _, w := range c.d.workers {
		b := c.d.workerReport(w)
		if b == nil {
			continue
		}
		var r struct {
			Rank         int      `json:"rank"`
			TestAccuracy *float64 `json:"test_accuracy"`
			TestAUC      *float64 `json:"test_auc"`
			TestLogLoss  *float64 `json:"test_logloss"`
		}
		if json.Unmarshal(b, &r) != nil || r.TestAccuracy == nil {
			continue
		}
		if best != nil && !(r.Rank < bestRank) {
			continue
		}
		best, bestRank = map[string]float64{"test_accuracy": *r.TestAccuracy}, r.Rank
		if r.TestAUC != nil {
			best["test_auc"] = *r.TestAUC
		}
		if r.TestLogLoss != nil {
			best["test_logloss"] = *r.TestLogLoss
		}
	}
	return best
}

// StageHistory asks the coordinator for its stage switches.
func (c *Cluster) StageHistory(ctx context.Context) (api.StageStatus, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return api.NewClient(c.d.coord, nil).Stage(cctx)
}

// WaitMachine waits until every process of machine has exited and
// returns how each ended, by node name ("exit status 0", "signal:
// killed").
func (c *Cluster) WaitMachine(ctx context.Context, machine string) (map[string]string, error) {
	c.mu.Lock()
	var procs []*proc
	for _, p := range c.d.sup.procs {
		if p.machine == machine {
			procs = append(procs, p)
		}
	}
	c.mu.Unlock()
	if len(procs) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownMachine, machine)
	}
	out := map[string]string{}
	for _, p := range procs {
		select {
		case <-p.exited:
			out[p.name] = exitString(p.waitErr)
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}

// RunDir is where the logs are.
func (c *Cluster) RunDir() string { return c.d.cfg.RunDir }

// Close stops every process (politely first, within grace) and waits
// for them.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		close(c.stop)
		if c.looping {
			<-c.loopDone
		}
		c.mu.Lock()
		for _, p := range c.d.sup.procs {
			if p.faulted == "" {
				p.faulted = drained
			}
		}
		c.mu.Unlock()
		c.d.sup.stopAll(3 * time.Second)
		dropEtcdData(c.d.cfg.RunDir, c.d.log)
		c.d.sup.close()
		c.logf.Close()
	})
}
