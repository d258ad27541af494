package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/ps"
)

// Errors callers can test with errors.Is.
var (
	// ErrBadConfig: a Config that cannot run.
	ErrBadConfig = errors.New("drill: bad configuration")
	// ErrNodeFailed: a node exited that no fault had hit.
	ErrNodeFailed = errors.New("drill: a node failed")
	// ErrNoTraining: training never started, or no worker finished.
	ErrNoTraining = errors.New("drill: training did not complete")
)

// Lines that nodes print and the drill reads from their output.
const (
	// MarkerRank, followed by the rank, is printed by a drill worker once
	// it has joined.
	MarkerRank = "terrace drill: worker rank "
	// MarkerFirstAck is printed by a drill worker when it sees its first
	// push acknowledged; the first of these starts the fault clock.
	MarkerFirstAck = "terrace drill: first acknowledged push"
	// MarkerEvictEndpoint, followed by host:port and "/evict", is what a
	// node started with --evict-http prints once it serves the eviction
	// endpoint of package evict. Nodes that never print it are evicted
	// with SIGTERM.
	MarkerEvictEndpoint = "eviction endpoint on http://"

	coordinatorMarker = "terrace coordinator listening on "
	statsMarker       = "stats "
	progressMarker    = "pass "
)

// DefaultWorkerCommand is the subcommand of the binary that runs a drill
// worker: `terrace worker` plus the audit (audit.go), its log and the
// markers above.
var DefaultWorkerCommand = []string{"train", "drill-worker"}

// Audit is what the drill needs to account for the audit tables.
type Audit struct {
	// Rows is the number of training rows (the row numbers the partition
	// loop hands out are 0 to Rows-1); Passes the passes asked for.
	Rows, Passes int
	// Every is how many acknowledged pushes a worker's audit log holds
	// before appending them (DefaultAuditEvery if 0).
	Every int
}

// Config configures a drill.
type Config struct {
	// Binary is the terrace executable (this one if empty).
	Binary string
	// RunDir receives a log per node, the workers' audit logs and
	// reports, and the drill's own log. A temporary directory if empty.
	RunDir string

	Servers, Workers, Replication, Partitions int
	// Account: the workers keep the examples account (coordinator
	// --account), which the report gives as examples_account.
	Account bool
	// Coordinators is the number of coordinator replicas (0 means 1); more
	// than one form their own etcd cluster and fail over for each other.
	Coordinators int

	Schedule Schedule
	// Seed chooses the victims: a run with the same seed and schedule
	// hits the same nodes.
	Seed uint64

	// WorkerCommand is the subcommand that runs a worker
	// (DefaultWorkerCommand if nil); WorkerArgs are passed to every worker
	// after the drill's own flags (the application's flags).
	WorkerCommand []string
	WorkerArgs    []string
	// LogLevel is passed to servers and workers (warn if empty).
	LogLevel string

	// Audit turns on accounting with the audit tables; nil for none.
	Audit *Audit
	// Evaluate, when set, scores the final model through c if rank 0, which
	// evaluates after every pass, did not finish; EvaluateTables are the
	// tables it reads, which the drill opens when training starts (the
	// coordinator may be gone at the end).
	Evaluate       func(ctx context.Context, c *ps.Client) (map[string]float64, error)
	EvaluateTables []string

	// Out receives progress: the run directory, rank 0's pass lines, the
	// faults as they happen.
	Out io.Writer
	// StartTimeout bounds the wait for the coordinator and for the first
	// acknowledged push (2 minutes if 0).
	StartTimeout time.Duration
	// FailureTimeout is passed to the coordinators (their default if 0).
	FailureTimeout time.Duration
	// Tiers, when set, runs machines of two classes in place of Servers
	// and Workers (tiers.go).
	Tiers *Tiers
	// CoordArgs are further flags for every coordinator (train
	// --processes's --checkpoint-dir, --checkpoint-every,
	// --checkpoint-keep, --resume).
	CoordArgs []string
	// AuditBase, for a job resumed from a checkpoint, is what the
	// checkpoint's audit table held by worker rank (CheckpointAudit): the
	// servers start with it, and it counts as acknowledged.
	AuditBase map[int]int64
}

// Node is one process of the drill.
type Node struct {
	Name string `json:"name"`
	Role Role   `json:"role"`
	PID  int    `json:"pid"`
	Log  string `json:"log"`
	Rank *int   `json:"rank,omitempty"`
	// Exit is how the process ended ("exit status 0", "signal: killed").
	Exit string `json:"exit"`
	// Fault is the fault that hit it, if any.
	Fault Action `json:"fault,omitempty"`
	// Finished is whether a worker trained to the end and wrote its report.
	Finished bool `json:"finished,omitempty"`
	// Machine and Class, with Config.Tiers: where the node ran.
	Machine string `json:"machine,omitempty"`
	Class   Role   `json:"class,omitempty"`
}

// Fault is a fault the drill injected.
type Fault struct {
	// TimeS is when it was injected, in seconds after training started;
	// PlannedS when the schedule asked.
	TimeS    float64 `json:"time_s"`
	PlannedS float64 `json:"planned_s"`
	Action   Action  `json:"action"`
	Role     Role    `json:"role"`
	Node     string  `json:"node"`
	PID      int     `json:"pid"`
	// Method is how: a signal, or the eviction endpoint POSTed.
	Method string `json:"method"`
	// Note says what else is worth knowing: how an eviction was delivered,
	// or what went wrong.
	Note string `json:"note,omitempty"`
}

// Skipped is a planned fault that was not injected, and why.
type Skipped struct {
	PlannedS float64 `json:"planned_s"`
	Action   Action  `json:"action"`
	Role     Role    `json:"role"`
	Reason   string  `json:"reason"`
}

// Report is what a drill found. Pointer fields are null when they could
// not be measured (no audit, or the audit tables could not be read); Notes
// say why.
type Report struct {
	RunDir            string    `json:"run_dir,omitempty"`
	Nodes             []Node    `json:"nodes,omitempty"`
	Faults            []Fault   `json:"faults"`
	FaultsNotInjected []Skipped `json:"faults_not_injected,omitempty"`
	// TrainingSeconds runs from the first acknowledged push to the exit
	// of the last worker.
	TrainingSeconds float64 `json:"training_seconds"`
	// MaxStallSeconds is the longest interval between two acknowledged
	// pushes, whichever workers saw them, from the workers' audit logs;
	// MaxStallAtSeconds is when it began, after training started.
	MaxStallSeconds   *float64 `json:"max_stall_seconds"`
	MaxStallAtSeconds *float64 `json:"max_stall_at_seconds"`

	AckedUpdatesLost       *int64 `json:"acked_updates_lost"`
	AckedUpdatesDuplicated *int64 `json:"acked_updates_duplicated"`
	ExamplesRepeated       *int64 `json:"examples_repeated"`
	ExamplesSkipped        *int64 `json:"examples_skipped"`
	ExamplesAudited        *int64 `json:"examples_audited"`
	// AckedExampleUpdatesLost is, when every worker finished (so that each
	// of their TrainedTable increments was acknowledged), the increments
	// the table lacks: ExamplesSkipped. Null when a worker stopped early,
	// whose untrained partitions cannot be told from lost increments.
	AckedExampleUpdatesLost *int64 `json:"acked_example_updates_lost"`
	RowsSkipped             *int64 `json:"rows_skipped"`
	// RowsOff lists the first rows trained other than passes times, with
	// their counts, to show where the loss or repetition lies.
	RowsOff []RowCount `json:"rows_off,omitempty"`
	// Audit is the accounting per worker.
	Audit []WorkerAudit `json:"audit,omitempty"`
	// FinalEvaluation is the drill's own score of the final model, made
	// when rank 0 did not finish.
	FinalEvaluation map[string]float64 `json:"final_evaluation,omitempty"`
	Notes           []string           `json:"notes,omitempty"`
	// Account is the coordinator's examples account at the end
	// (events.go), beside the audit's examples_repeated and
	// examples_skipped.
	Account *ExamplesAccount `json:"examples_account,omitempty"`
	// CopiesLost and Rewinds are the coordinator's counts at the end:
	// layouts that lost every copy of some slots, and times the cluster
	// went back to its newest checkpoint for it (--on-copies-lost resume).
	CopiesLost int `json:"copies_lost,omitempty"`
	Rewinds    int `json:"rewinds,omitempty"`
	// Events is the coordinator's timeline at the end (events.go).
	Events []api.Event `json:"events,omitempty"`
	// History is the coordinator's samples of the cluster over time
	// (machines by class, stage, dollars), for terrace plot.
	History []api.Sample `json:"history,omitempty"`

	// WorkerReports are the reports of the workers that finished, by
	// rank; ServerStats each server's last statistics line (JSON of
	// server.Stats), by node name.
	WorkerReports map[int]json.RawMessage    `json:"-"`
	ServerStats   map[string]json.RawMessage `json:"-"`

	// The tiers' figures, with Config.Tiers.
	*TierReport
}

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// Run runs a drill until every worker has exited, then stops the other
// nodes and returns the report. It returns a report together with an
// error when a node failed that no fault hit or training did not
// complete, so the caller can still write what was found; the error alone
// when nothing could start.
//
// Run stops every process it started before it returns, and on Linux the
// kernel stops them if the drill itself is killed.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if t := cfg.Tiers; t != nil {
		cfg.Servers, cfg.Workers = t.Reliable+t.Transient, (t.Reliable+t.Transient)*t.perMachine()
	}
	if cfg.Coordinators < 0 || cfg.Servers < 1 || cfg.Workers < 1 {
		return nil, fmt.Errorf("%w: need a coordinator, at least one server and one worker; got %d, %d and %d", ErrBadConfig, max(cfg.Coordinators, 1), cfg.Servers, cfg.Workers)
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("drill: finding this executable: %w", err)
		}
		cfg.Binary = exe
	}
	if cfg.WorkerCommand == nil {
		cfg.WorkerCommand = DefaultWorkerCommand
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "warn"
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	var err error
	if cfg.RunDir, err = prepareRunDir(cfg.RunDir, "terrace-drill-"); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(cfg.RunDir, "drill.log"))
	if err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	defer logf.Close()
	d := &drill{cfg: cfg, machines: map[Role]int{}, log: slog.New(slog.NewTextHandler(logf, nil)), rep: &Report{RunDir: cfg.RunDir, Faults: []Fault{}}}
	fmt.Fprintf(cfg.Out, "terrace: drill run directory %s (a log per node)\n", cfg.RunDir)
	d.sup = newSupervisor(cfg.Binary, cfg.RunDir, d.interesting)
	err = d.run(ctx)
	if d.observer != nil {
		d.observer.Close()
	}
	d.sup.close()
	d.finish()
	return d.rep, err
}

func workerFile(i int, ext string) string { return fmt.Sprintf("worker-%d%s", i, ext) }

// awaitCoordinator handles the nodes' lines until coordinator c says it
// listens, and fails if it exits first or by fires (timeout after the
// start).
func (d *drill) awaitCoordinator(ctx context.Context, c *proc, by <-chan time.Time, timeout time.Duration) error {
	for !d.coordUp {
		select {
		case l := <-d.sup.lines:
			d.handle(l)
		case <-c.exited:
			return fmt.Errorf("%w: the coordinator exited at start (%v); see %s%s", ErrNodeFailed, c.waitErr, c.log, excerpt(c.log))
		case <-by:
			return fmt.Errorf("%w: the coordinator did not listen within %v; see %s", ErrNoTraining, timeout, c.log)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// dropEtcdData removes the coordinators' etcd data from a run directory
// once every process has stopped: about 65 MB each (etcd preallocates its
// log), of no use after the run, where the logs and reports are what a
// run directory is kept for. Drills and replays left them in /tmp by the
// gigabyte.
func dropEtcdData(dir string, log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(dir, "etcd*"))
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			log.Warn("drill: removing the coordinator's etcd data", "dir", d, "err", err)
		}
	}
}

// prepareRunDir makes dir (a new temporary one named after prefix if
// empty), returns it absolute, and removes the worker reports and audit
// logs an earlier run left there, which would be read as this run's (a
// worker that finished before it started).
func prepareRunDir(dir, prefix string) (string, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", prefix)
		if err != nil {
			return "", fmt.Errorf("drill: run directory: %w", err)
		}
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("drill: run directory: %w", err)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	for _, pat := range []string{"worker-*.json", "worker-*.audit"} { // workerFile's
		old, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, f := range old {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				return "", fmt.Errorf("drill: run directory: %w", err)
			}
		}
	}
	return dir, nil
}

// drill is one run's state; its loop is the only goroutine that touches it.
type drill struct {
	cfg   Config
	log   *slog.Logger
	rep   *Report
	sup   *supervisor
	coord string // the coordinators' addresses, comma-separated
	// coordUp is set once a coordinator leads; multiCoord when several
	// replicas run (their addresses are fixed up front).
	coordUp, multiCoord bool
	started             time.Time
	observer            *ps.Client
	workers             []*proc
	done                bool // every worker has exited
	// With Config.Tiers: machines started by class, the stage history
	// read at the end, the acknowledgement timelines.
	machines  map[Role]int
	stage     *api.StageStatus
	timelines [][]int64
	auto      *autoPilot // --stage auto
}

// interesting runs on the pumps' goroutines: it keeps servers' last
// statistics and announced eviction endpoints, and picks the lines the
// loop acts on.
func (d *drill) interesting(p *proc, text string) bool {
	if i := strings.Index(text, MarkerEvictEndpoint); i >= 0 {
		p.mu.Lock()
		addr, _, _ := strings.Cut(text[i+len(MarkerEvictEndpoint):], "/")
		p.evictAddr = strings.TrimSpace(addr)
		p.mu.Unlock()
		return false
	}
	switch p.role {
	case Server:
		if s, ok := strings.CutPrefix(text, statsMarker); ok {
			p.mu.Lock()
			p.lastStats, p.statsAt = s, time.Now()
			p.mu.Unlock()
		}
		return false
	case Coordinator:
		return strings.HasPrefix(text, coordinatorMarker)
	}
	return strings.HasPrefix(text, MarkerRank) || text == MarkerFirstAck || strings.HasPrefix(text, progressMarker)
}

func (d *drill) run(ctx context.Context) error {
	cfg := d.cfg
	common := []string{"--servers", strconv.Itoa(cfg.Servers), "--workers", strconv.Itoa(cfg.Workers),
		"--partitions", strconv.Itoa(cfg.Partitions), "--replication", strconv.Itoa(cfg.Replication)}
	if cfg.Account {
		common = append(common, "--account")
	}
	if cfg.FailureTimeout > 0 {
		common = append(common, "--failure-timeout", cfg.FailureTimeout.String())
	}
	common = append(common, cfg.CoordArgs...)
	if t := cfg.Tiers; t != nil {
		if t.Stage == AutoStage {
			a, stage, err := newAutoPilot(t)
			if err != nil {
				return fmt.Errorf("%w: --stage auto: %w", ErrBadConfig, err)
			}
			d.auto = a
			tc := *t
			tc.Stage, tc.StageReason = stage.String(), a.startReason
			common = append(common, tc.coordArgs()...)
		} else {
			common = append(common, t.coordArgs()...)
		}
	}
	var c *proc
	var err error
	if n := max(cfg.Coordinators, 1); n == 1 {
		c, err = d.sup.start("coordinator", Coordinator, append([]string{"coordinator", "--listen", "127.0.0.1:0",
			"--etcd-dir", filepath.Join(cfg.RunDir, "etcd")}, common...)...)
	} else {
		// Replicas that form their own etcd cluster: their addresses must
		// be known up front, and every node is given all of them.
		ports, perr := freePorts(2 * n)
		if perr != nil {
			return perr
		}
		var cluster []string
		for i := range n {
			cluster = append(cluster, fmt.Sprintf("c%d=http://%s", i, ports[n+i]))
		}
		d.coord = strings.Join(ports[:n], ",")
		for i := range n {
			p, serr := d.sup.start(fmt.Sprintf("coordinator-%d", i), Coordinator, append([]string{"coordinator", "--id", fmt.Sprintf("c%d", i),
				"--listen", ports[i], "--etcd-peer", ports[n+i], "--etcd-cluster", strings.Join(cluster, ","),
				"--etcd-dir", filepath.Join(cfg.RunDir, fmt.Sprintf("etcd-%d", i))}, common...)...)
			if serr != nil {
				return serr
			}
			if c == nil {
				c = p
			}
		}
		d.multiCoord = true
	}
	if err != nil {
		return err
	}
	// One deadline for the whole start: the coordinator's, then training's.
	startBy := time.NewTimer(cfg.StartTimeout)
	defer startBy.Stop()
	if err := d.awaitCoordinator(ctx, c, startBy.C, cfg.StartTimeout); err != nil {
		return err
	}
	if t := cfg.Tiers; t != nil {
		for _, class := range []Role{Reliable, Transient} {
			n := t.Reliable
			if class == Transient {
				n = t.Transient
			}
			for i := range n {
				if err := d.startMachine(class, i); err != nil {
					return err
				}
			}
		}
	} else {
		for i := range cfg.Servers {
			if _, err := d.startServer(fmt.Sprintf("server-%d", i)); err != nil {
				return err
			}
		}
		for i := range cfg.Workers {
			if _, err := d.startWorker(fmt.Sprintf("worker-%d", i)); err != nil {
				return err
			}
		}
	}

	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6472696c6c)) // "drill"
	next := 0
	var faultC <-chan time.Time
	var faultT *time.Timer
	defer func() {
		if faultT != nil {
			faultT.Stop()
		}
	}()
	arm := func() {
		if next >= len(cfg.Schedule) {
			faultC = nil
			return
		}
		wait := time.Until(d.started.Add(cfg.Schedule[next].At))
		if faultT == nil {
			faultT = time.NewTimer(wait)
		} else {
			faultT.Reset(wait)
		}
		faultC = faultT.C
	}
	startC := startBy.C
	var failed []error
	var planC <-chan time.Time
	if d.auto != nil {
		planT := time.NewTicker(autoEvery)
		defer planT.Stop()
		planC = planT.C
	}
	for !d.done {
		select {
		case <-planC:
			d.replan(ctx)
		case l := <-d.sup.lines:
			if d.handle(l) {
				startBy.Stop()
				startC = nil
				fmt.Fprintf(cfg.Out, "terrace: training started (first acknowledged push); %d fault(s) scheduled\n", len(cfg.Schedule))
				arm()
				d.connectObserver(ctx)
			}
		case p := <-d.sup.exits:
			if err := d.exited(p); err != nil {
				failed = append(failed, err)
			}
		case <-faultC:
			d.inject(cfg.Schedule[next], rng)
			next++
			arm()
		case <-startC:
			return fmt.Errorf("%w: no push was acknowledged within %v of the start; see the logs in %s", ErrNoTraining, cfg.StartTimeout, cfg.RunDir)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, p := range cfg.Schedule[next:] {
		d.rep.FaultsNotInjected = append(d.rep.FaultsNotInjected, Skipped{PlannedS: p.At.Seconds(), Action: p.Action, Role: p.Role, Reason: "training had finished"})
	}
	if !d.started.IsZero() {
		d.rep.TrainingSeconds = time.Since(d.started).Seconds()
		d.stageStatus(ctx)
		d.account(ctx)
	}
	if cfg.Audit == nil {
		d.rep.note("no audit: training started when the first worker started its job, and the accounting fields are null")
	}
	d.timeline(ctx)
	// The workers are gone: stop the rest, politely first.
	d.sup.stopAll(3 * time.Second)
	dropEtcdData(d.cfg.RunDir, d.log)
	finished := 0
	for _, w := range d.workers {
		if d.workerReport(w) != nil {
			finished++
		}
	}
	if finished == 0 {
		failed = append(failed, fmt.Errorf("%w: no worker finished", ErrNoTraining))
	}
	return errors.Join(failed...)
}

// startServer starts server name with extra flags.
func (d *drill) startServer(name string, extra ...string) (*proc, error) {
	return d.sup.start(name, Server, append([]string{"server", "--coordinator", d.coord, "--id", name,
		"--listen", "127.0.0.1:0", "--log-level", d.cfg.LogLevel, "--stats-every", "500ms", "--evict-http", "127.0.0.1:0"}, extra...)...)
}

// startWorker starts worker name with extra flags; its files are named
// after its place in d.workers.
func (d *drill) startWorker(name string, extra ...string) (*proc, error) {
	cfg := d.cfg
	i := len(d.workers)
	args := append(slices.Clone(cfg.WorkerCommand), "--coordinator", d.coord, "--id", name,
		"--log-level", cfg.LogLevel, "--evict-http", "127.0.0.1:0", "--report", filepath.Join(cfg.RunDir, workerFile(i, ".json")))
	if cfg.Audit != nil {
		args = append(args, "--audit-log", filepath.Join(cfg.RunDir, workerFile(i, ".audit")),
			"--audit-every", strconv.Itoa(cmpOr(cfg.Audit.Every, DefaultAuditEvery)))
	}
	args = append(args, extra...)
	p, err := d.sup.start(name, Worker, append(args, cfg.WorkerArgs...)...)
	if err != nil {
		return nil, err
	}
	d.workers = append(d.workers, p)
	return p, nil
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// handle acts on a line; it reports whether the line started training.
func (d *drill) handle(l line) bool {
	switch {
	case l.p.role == Coordinator:
		d.coordUp = true
		if !d.multiCoord {
			addr := strings.TrimPrefix(l.text, coordinatorMarker)
			addr, _, _ = strings.Cut(addr, ",")
			d.coord = strings.TrimSpace(addr)
		}
	case strings.HasPrefix(l.text, MarkerRank):
		if r, err := strconv.Atoi(strings.TrimPrefix(l.text, MarkerRank)); err == nil {
			l.p.rank = r
		}
	case l.text == MarkerFirstAck:
		if d.started.IsZero() {
			d.started = time.Now()
			d.log.Info("training started", "worker", l.p.name)
			return true
		}
	case strings.HasPrefix(l.text, progressMarker):
		fmt.Fprintln(d.cfg.Out, l.text)
	}
	return false
}

// connectObserver connects the drill's own client (no rank: its reads
// never wait) once the tables exist, so that it can read the audit tables
// at the end even if the coordinator has been killed by then.
func (d *drill) connectObserver(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := ps.Dial(cctx, d.coord, ps.Options{Rank: -1, NodeID: "drill-observer", Logger: d.log})
	if err != nil {
		d.rep.note("the drill could not connect its observer at the start of training: %v", err)
		return
	}
	names := []string{}
	if d.cfg.Audit != nil {
		names = append(names, AuditTable, TrainedTable)
	}
	if d.cfg.Evaluate != nil {
		names = append(names, d.cfg.EvaluateTables...)
	}
	for _, n := range names {
		if _, err := c.Table(cctx, n); err != nil {
			d.rep.note("the drill's observer could not open table %s at the start of training: %v", n, err)
		}
	}
	d.observer = c
}

// exited handles the exit of a process; it returns an error for a node
// that failed without a fault.
func (d *drill) exited(p *proc) error {
	if p.handled {
		return nil
	}
	d.log.Info("exited", "node", p.name, "err", p.waitErr, "fault", p.faulted)
	var failure error
	if p.faulted == "" && (p.role != Worker || d.workerReport(p) == nil) {
		failure = fmt.Errorf("%w: %s exited (%v) though no fault hit it; see %s%s", ErrNodeFailed, p.name, exitString(p.waitErr), p.log, excerpt(p.log))
		fmt.Fprintf(d.cfg.Out, "terrace: %s exited (%v) though no fault hit it; see %s\n", p.name, exitString(p.waitErr), p.log)
	}
	p.handled = true
	d.done = !slices.ContainsFunc(d.workers, func(w *proc) bool { return !w.handled })
	return failure
}

// refreshObserver brings the observer's layout up to date while the
// coordinator can still be asked, by reading through it: a server that is
// ahead makes the client fetch the newer layout.
func (d *drill) refreshObserver() {
	if d.observer == nil || d.cfg.Audit == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, _, err := ReadAudit(ctx, d.observer, len(d.workers), 0); err != nil {
		d.log.Warn("refreshing the observer before the coordinator goes", "err", err)
	}
}

// inject carries out one planned fault on a live node of its role.
func (d *drill) inject(pl Planned, rng *rand.Rand) {
	if pl.Role.IsClass() {
		d.injectClass(pl, rng)
		return
	}
	var live []*proc
	for _, p := range d.sup.procs {
		if p.role == pl.Role && p.faulted == "" && !p.done() {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		d.rep.FaultsNotInjected = append(d.rep.FaultsNotInjected, Skipped{PlannedS: pl.At.Seconds(), Action: pl.Action, Role: pl.Role, Reason: "no live " + string(pl.Role)})
		return
	}
	p := live[rng.IntN(len(live))]
	if pl.Role == Coordinator {
		d.refreshObserver()
	}
	d.hit(pl, p)
}

// hit carries out planned fault pl on node p.
func (d *drill) hit(pl Planned, p *proc) {
	f := Fault{PlannedS: pl.At.Seconds(), Action: pl.Action, Role: pl.Role, Node: p.name, PID: p.pid()}
	var err error
	switch pl.Action {
	case Kill:
		f.Method = killMethod
		err = d.sup.kill(p)
	case Evict:
		p.mu.Lock()
		addr := p.evictAddr
		p.mu.Unlock()
		if addr != "" {
			f.Method = "POST http://" + addr + "/evict"
			err = postEvict(addr)
		} else {
			f.Method, err = terminate(p.cmd.Process)
			f.Note = "the node announced no eviction endpoint"
		}
	}
	f.TimeS = time.Since(d.started).Seconds()
	if err != nil {
		f.Note = strings.TrimPrefix(f.Note+"; failed: "+err.Error(), "; ")
	}
	p.faulted = pl.Action
	d.rep.Faults = append(d.rep.Faults, f)
	fmt.Fprintf(d.cfg.Out, "terrace: %.2fs: %s %s (pid %d): %s\n", f.TimeS, f.Action, f.Node, f.PID, f.Method)
}

func postEvict(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/evict", strings.NewReader(`{"detail":"terrace drill"}`))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("eviction endpoint answered %s", resp.Status)
	}
	return nil
}

// workerReport returns the report a worker wrote when it finished, or nil.
func (d *drill) workerReport(p *proc) json.RawMessage {
	i := slices.Index(d.workers, p)
	if i < 0 {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(d.cfg.RunDir, workerFile(i, ".json")))
	if err != nil || !json.Valid(b) {
		return nil
	}
	return b
}

// account reads the audit tables through the observer, and scores the
// final model if rank 0 did not finish.
func (d *drill) account(ctx context.Context) {
	reports := map[int]json.RawMessage{}
	for _, w := range d.workers {
		if b := d.workerReport(w); b != nil {
			var r struct {
				Rank int `json:"rank"`
			}
			if json.Unmarshal(b, &r) == nil {
				reports[r.Rank] = b
			}
		}
	}
	d.rep.WorkerReports = reports
	if d.observer == nil {
		if d.cfg.Audit != nil || d.cfg.Evaluate != nil {
			d.rep.note("no accounting: the drill had no client to read the tables with")
		}
		return
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if d.cfg.Audit != nil {
		perWorker, perRow, err := ReadAudit(actx, d.observer, len(d.workers), d.cfg.Audit.Rows)
		if err != nil {
			d.rep.note("no accounting: reading the audit tables: %v", err)
		} else {
			d.accountAudit(perWorker, perRow)
		}
	}
	if _, ok := reports[0]; !ok && d.cfg.Evaluate != nil {
		m, err := d.cfg.Evaluate(actx, d.observer)
		if err != nil {
			d.rep.note("rank 0 did not finish, and the drill could not score the final model: %v", err)
		} else {
			d.rep.FinalEvaluation = m
			d.rep.note("rank 0 did not finish: the test metrics are the drill's own evaluation of the final model")
		}
	}
}

func (d *drill) accountAudit(perWorker, perRow []float32) {
	var audits []WorkerAudit
	var timelines [][]int64
	for i, w := range d.workers {
		a := WorkerAudit{Node: w.name, Rank: w.rank, Finished: d.workerReport(w) != nil}
		wl, err := ReadAuditLog(filepath.Join(d.cfg.RunDir, workerFile(i, ".audit")))
		switch {
		case err == nil:
			a.Rank, a.AckedLogged, a.LogComplete = wl.Rank, wl.Acked, wl.Complete
			timelines = append(timelines, wl.Times)
		case errors.Is(err, os.ErrNotExist):
			// It saw no push acknowledged: nothing to lose.
		default:
			d.rep.note("%s: %v", w.name, err)
		}
		audits = append(audits, a) // rank -1: it never said; it lost nothing

	}
	audits = addBase(audits, d.cfg.AuditBase)
	d.rep.fill(audits, timelines, perWorker, perRow, d.cfg.Audit.Passes, d.started)
	d.timelines = timelines
}

// finish fills the nodes and the servers' statistics once every process
// has been waited for.
func (d *drill) finish() {
	d.rep.ServerStats = map[string]json.RawMessage{}
	for _, p := range d.sup.procs {
		n := Node{Name: p.name, Role: p.role, PID: p.pid(), Log: p.log, Exit: exitString(p.waitErr), Fault: p.faulted,
			Machine: p.machine, Class: p.class}
		if p.rank >= 0 {
			r := p.rank
			n.Rank = &r
		}
		if p.role == Worker {
			n.Finished = d.workerReport(p) != nil
		}
		p.mu.Lock()
		if p.lastStats != "" && json.Valid([]byte(p.lastStats)) {
			d.rep.ServerStats[p.name] = json.RawMessage(p.lastStats)
		}
		p.mu.Unlock()
		d.rep.Nodes = append(d.rep.Nodes, n)
	}
	d.fillTiers(d.timelines)
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// excerpt returns the telling lines of a log for an error message: a
// panic and the first frames of its goroutine, or else the last lines.
func excerpt(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "panic: ") }); i >= 0 {
		lines = lines[i:min(len(lines), i+10)]
	} else {
		lines = lines[max(0, len(lines)-5):]
	}
	return ":\n\t" + strings.Join(lines, "\n\t")
}

// freePorts returns n loopback addresses that were free a moment ago.
func freePorts(n int) ([]string, error) {
	var addrs []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("drill: pick a port: %w", err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}
