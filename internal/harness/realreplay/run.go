package realreplay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/harness/drill"
	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/jobsim"
	"github.com/terrace-ml/terrace/internal/market/localprov"
	"github.com/terrace-ml/terrace/internal/market/policy"
	"github.com/terrace-ml/terrace/internal/market/replay"
	"github.com/terrace-ml/terrace/internal/market/rm"
	"github.com/terrace-ml/terrace/internal/market/traceprov"
	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
)

// Errors callers can test with errors.Is.
var (
	// ErrNotReal: a policy the real replay cannot run yet.
	ErrNotReal = errors.New("cannot run for real yet")
	// ErrTooMany: a footprint too large to run as processes on this host.
	ErrTooMany = errors.New("too many machines for one host")
	// ErrSegmentEnded: the segment ended before the job did.
	ErrSegmentEnded = errors.New("the segment ends before the job finishes")
)

// MaxMachines bounds the machines a real replay holds at once: each is a
// server and workers on this one host.
const MaxMachines = 8

// Check says whether policy name can run for real, and why not.
func Check(name string) error {
	switch name {
	case "ondemand", "tiers", "checkpoint", "bidbrain":
		return nil
	}
	if _, err := policy.New(name, policy.Config{}); err != nil {
		return err
	}
	return fmt.Errorf("policy %s %w", name, ErrNotReal)
}

// Bound is the most machines policy name runs as processes at once under
// calibration cal (BidBrain in design, policy.Designs), and the
// calibration fields that set it. ondemand, checkpoint and tiers hold at
// most machines transient (or on-demand) and reliable_machines reliable
// ones. BidBrain holds reliable_machines (none in the elastic design;
// auto may choose either) and at most max_machines transient machines
// not on notice, over all its markets together (BidBrain.acquire stops
// at max_machines: how many markets it uses at once does not change the
// count). A machine it
// releases drains in wall time while the one it buys in its place in the
// same decision starts boot_seconds of trace later, and a noticed machine
// is no longer counted while it runs out its notice, so each of the
// max_machines may run twice over for a moment: a server's drain took
// about 0.6 s of wall time after its release (2026-11-27), a boot at 900x
// is 0.33 s. The machines running at once are in Result.PeakMachines.
func Bound(name, design string, cal jobsim.Calibration) (int, string) {
	switch {
	case name == "bidbrain" && design == policy.DesignElastic:
		return 2 * cal.MaxMachines, fmt.Sprintf("twice max_machines %d, no reliable machine in the elastic design", cal.MaxMachines)
	case name == "bidbrain":
		return cal.ReliableMachines + 2*cal.MaxMachines, fmt.Sprintf("reliable_machines %d and twice max_machines %d", cal.ReliableMachines, cal.MaxMachines)
	}
	return cal.Machines + cal.ReliableMachines, fmt.Sprintf("machines %d and reliable_machines %d", cal.Machines, cal.ReliableMachines)
}

// CheckBound refuses a policy whose Bound exceeds MaxMachines, naming the
// calibration fields.
func CheckBound(name, design string, cal jobsim.Calibration) error {
	if n, fields := Bound(name, design, cal); n > MaxMachines {
		return fmt.Errorf("%s holds up to %d machines at once (%s), each a server and workers on this host: %w (at most %d)", name, n, fields, ErrTooMany, MaxMachines)
	}
	return nil
}

// Config is one real replay.
type Config struct {
	Replay replay.Config
	// Speedup is trace seconds per wall second.
	Speedup float64
	// End is the trace time the job must have finished by.
	End time.Time
	// Passes is the job's passes over its data (its progress is counted
	// in the passes rank 0 finishes).
	Passes int
	// Cluster says how to run the processes (Servers, Workers and Stage
	// are set from the policy's first plan).
	Cluster drill.ClusterConfig
	// Clock is wall time (the system's if nil).
	Clock traceprov.Clock
	// Progress receives a line per pass and per machine event.
	Progress io.Writer
}

// Result is what one policy's real run cost and reached. UpdatesLost
// comes from the drill's audit tables: the acknowledged updates the
// servers do not hold at the end, and for checkpoint-restart those its
// restarts rolled back (null if the audit could not be read).
type Result struct {
	replay.Result
	UpdatesLost  *float64 `json:"updates_lost"`
	TestAccuracy *float64 `json:"test_accuracy,omitempty"`
	TestAUC      *float64 `json:"test_auc,omitempty"`
	WallSeconds  float64  `json:"wall_seconds"`
	Speedup      float64  `json:"speedup"`
	RunDir       string   `json:"run_dir"`
	// StageHistory is the coordinator's: each switch and fallback, in
	// wall time (what calibrates the model's switch pauses).
	StageHistory []api.StageChange `json:"stage_history,omitempty"`
	// PeakMachines is the most machines that had a process running at
	// once (a draining machine counts): what the host ran, against Bound.
	PeakMachines int `json:"peak_machines"`
	// Restarts counts a flat job's restarts from its checkpoint
	// (checkpoint-restart, or BidBrain's elastic design).
	Restarts int `json:"restarts,omitempty"`
	// CheckpointRequests are the trace times at which a flat job's
	// policy asked the coordinator for a checkpoint (at its interval τ);
	// CheckpointsCommitted is the newest committed checkpoint's number at
	// the end (numbers go on across restarts).
	CheckpointRequests   []time.Time `json:"checkpoint_requests,omitempty"`
	CheckpointsCommitted uint64      `json:"checkpoints_committed,omitempty"`
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// run is one real run's state; only Run's goroutine touches it (the
// provider's events arrive on it, from AdvanceTo and Release).
type run struct {
	ctx     context.Context
	cfg     Config
	name    string
	mgr     *rm.Manager
	prov    *localprov.Provider
	cluster *drill.Cluster
	job     *job
	err     error
	flat    *flat // checkpoint-restart and BidBrain's elastic design (flat.go); nil otherwise
	// checkpoints are the trace times of the policy's checkpoint
	// requests; askedSeq the checkpoint the last one was told it serves.
	checkpoints []time.Time
	askedSeq    uint64
	// peak is the most machines running at once in the clusters a
	// flat job has stopped.
	peak int
	// runDir is the first cluster's run directory.
	runDir string
}

// Run replays policy name from start on real processes until the job is
// done, then releases every machine and stops every process (also on
// error and when ctx ends).
func Run(ctx context.Context, cfg Config, name string, start time.Time) (Result, error) {
	res := Result{Result: replay.Result{Policy: name, Start: start, Design: name}, Speedup: cfg.Speedup}
	if err := Check(name); err != nil {
		return res, err
	}
	if err := CheckBound(name, cfg.Replay.Design, cfg.Replay.Cal); err != nil {
		return res, err
	}
	if !(cfg.Speedup > 0) {
		return res, fmt.Errorf("speedup %g: want a positive factor", cfg.Speedup)
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	pol, err := policy.New(name, cfg.Replay.PolicyConfig())
	if err != nil {
		return res, err
	}
	// Every worker audits its pushes (as train --processes does), which
	// gives updates_lost. One record a write: a killed worker's log then
	// lacks only the acknowledgements it had not yet written.
	cfg.Cluster.Audit = &drill.Audit{Passes: cfg.Passes, Every: 1}
	r := &run{ctx: ctx, cfg: cfg, name: name, job: &job{total: cfg.Replay.Updates, of: cfg.Passes, ckptAt: start}}
	machines := &clusterMachines{r: r}
	r.prov = localprov.New(ctx, localprov.Config{
		Trace:    traceprov.Config{Source: cfg.Replay.Source(start), Model: cfg.Replay.Model, Boot: cfg.Replay.Cal.Boot(), Start: start},
		Machines: machines, Handler: r.handle})
	// BidBrain chooses its design at the start, as in the simulation.
	if d, err := replay.ChooseDesign(ctx, pol, r.prov.Past, cfg.Replay.Updates); err != nil {
		return res, err
	} else if d != "" {
		res.Design = d
	}
	if res.Design == "checkpoint" || res.Design == policy.DesignElastic {
		r.flat = &flat{held: map[string]*machine{}, elastic: res.Design == policy.DesignElastic, k: cfg.Replay.Cal.K()}
		r.job.ask = r.checkpoint
		if r.flat.elastic {
			r.job.committed = r.committed
		}
	}
	r.mgr = rm.NewManager(r.prov, pol, r.job)
	if err := r.mgr.Start(ctx); err != nil {
		return res, err
	}
	cc, err := r.firstPlan(cfg.Cluster)
	if err != nil {
		return res, err
	}
	if r.flat != nil {
		// The policy's footprint, which it may not hold yet (a market
		// with no capacity at the start): the cluster forms when it does
		// (an elastic job: with its first machine).
		cc, err = r.flat.configure(cc, cfg.Replay.Cal.Machines)
		if err != nil {
			return res, err
		}
	}
	if r.flat != nil {
		defer r.flat.close()
	}
	if r.flat == nil || !r.flat.down {
		if r.cluster, err = drill.StartCluster(ctx, cc); err != nil {
			return res, err
		}
		r.runDir = r.cluster.RunDir()
	}
	defer func() {
		if r.cluster != nil {
			r.cluster.Close()
		}
	}()
	r.job.passes, r.job.now, r.job.working = r.passes, r.prov.Trace().Now, r.working
	wall0 := cfg.Clock.Now()
	fin, err := r.loop(ctx, start, wall0)
	if err != nil {
		return res, fmt.Errorf("%s from %s: %w", name, start.Format(time.RFC3339), err)
	}
	machines.done = true
	if r.flat != nil {
		r.flat.over = true
	}
	res.RunDir = r.runDir
	return r.finish(ctx, res, start, fin, wall0)
}

// firstPlan sizes the cluster's formation: the reliable machines of the
// policy's first plan. Transient machines join as the market lets them
// come up, as the drill's --add does: forming with them would hold the
// job until they did, and a market that evicts them during their boot
// (a preemption trace at zero) would hold it for hours, while the
// simulated job trains on the reliable machines meanwhile. tiers and
// bidbrain form in stage 2 (stage 1 until a transient machine joins,
// which switches it to 2), ondemand in stage 1.
func (r *run) firstPlan(cc drill.ClusterConfig) (drill.ClusterConfig, error) {
	held := r.mgr.Held()
	reliable := 0
	for _, h := range held {
		if h.Class == market.Reliable {
			reliable++
		}
	}
	switch {
	case reliable == 0 && r.flat == nil:
		return cc, fmt.Errorf("%s: no reliable machine in the first plan: the coordinator and the authoritative copy need one", r.name)
	case len(held) > MaxMachines:
		return cc, fmt.Errorf("%s asks for %d machines at the start: %w (at most %d; give --calibration a smaller machines and reliable_machines)", r.name, len(held), ErrTooMany, MaxMachines)
	}
	per := max(1, cc.WorkersPerMachine)
	cc.Servers, cc.Workers, cc.Stage = reliable, reliable*per, "1"
	// Four partitions for each worker of the largest footprint, as the
	// coordinator gives each worker of its formation.
	bound, _ := Bound(r.name, r.cfg.Replay.Design, r.cfg.Replay.Cal)
	cc.Partitions = 4 * per * max(bound, len(held))
	if r.name == "tiers" || r.name == "bidbrain" {
		cal := r.cfg.Replay.Cal
		// The stage the calibration's job is asked for (2 if it leaves
		// the planner to choose: --stage auto is not wired here).
		cc.Stage = "2"
		if cal.Stage >= 2 {
			cc.Stage = strconv.Itoa(cal.Stage)
		}
	}
	return cc, nil
}

// handle passes a provider event to the manager.
func (r *run) handle(ev market.Event) {
	if r.err != nil {
		return
	}
	if r.cfg.Progress != nil && ev.Kind != market.PriceChange {
		fmt.Fprintf(r.cfg.Progress, "replay: %s %s: %s machine %d (%s, %s) %s\n", r.name, ev.At.Format(time.RFC3339), ev.Kind, ev.Machine.ID, ev.Machine.Class, ev.Machine.Market, r.prov.Machine(ev.Machine.ID))
	}
	r.err = r.mgr.Handle(r.ctx, ev)
}

// traceAt is the trace time at wall time w.
func (r *run) traceAt(start, wall0, w time.Time) time.Time {
	return start.Add(time.Duration(float64(w.Sub(wall0)) * r.cfg.Speedup))
}

// loop applies the trace's events as their times come, in compressed
// time, until the job finishes; it returns the trace time of the end.
func (r *run) loop(ctx context.Context, start, wall0 time.Time) (time.Time, error) {
	clock := r.cfg.Clock
	for {
		next := replay.Earliest(r.prov.Trace().Next(), r.mgr.Wake())
		if next.IsZero() || next.After(r.cfg.End) {
			next = r.cfg.End
		}
		due := wall0.Add(time.Duration(float64(next.Sub(start)) / r.cfg.Speedup))
		var after <-chan time.Time
		if wait := due.Sub(clock.Now()); wait > 0 {
			after = clock.After(wait)
		} else {
			c := make(chan time.Time, 1)
			c <- due
			after = c
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-r.finished():
			return r.traceAt(start, wall0, clock.Now()), nil
		case <-after:
		}
		if !next.Before(r.cfg.End) {
			return time.Time{}, fmt.Errorf("%w (at %s, pass %d done)", ErrSegmentEnded, r.cfg.End.Format(time.RFC3339), r.passes())
		}
		r.prov.Trace().AdvanceTo(next)
		if err := r.mgr.Tick(ctx, next); err != nil {
			return time.Time{}, err
		}
		if err := r.failed(); err != nil {
			return time.Time{}, err
		}
		if err := r.restart(ctx); err != nil {
			return time.Time{}, err
		}
	}
}

// checkpoint asks the running coordinator for a checkpoint: the
// checkpoint policy's decision at its interval, taken at the next pass
// boundary (its interval τ counts passes), or an elastic BidBrain's,
// taken at once, inside the pass (docs/design/resilience.md,
// "Checkpoints inside a pass"), as its model and Daly's interval assume:
// at a boundary it came up to a pass late, and BidBrain's release of its
// last machine waited for it.
func (r *run) checkpoint(ctx context.Context) (uint64, error) {
	if r.flat == nil || r.flat.down || r.cluster == nil {
		return 0, nil // nothing runs to checkpoint
	}
	now := r.flat.elastic
	seq, err := r.cluster.RequestCheckpoint(ctx, now)
	if errors.Is(err, api.ErrNothingToCheckpoint) {
		return 0, nil // asked now before the job's tables: nothing trained yet
	}
	if err != nil {
		return 0, err
	}
	at := r.prov.Trace().Now()
	r.checkpoints = append(r.checkpoints, at)
	// Requests before the next pass boundary share one checkpoint (an
	// interval shorter than a pass): the first is told.
	if r.cfg.Progress != nil && seq != r.askedSeq {
		r.askedSeq = seq
		when := "at the next pass boundary"
		if now {
			when = "inside the pass"
		}
		fmt.Fprintf(r.cfg.Progress, "replay: %s %s: checkpoint %d asked for (%s)\n", r.name, at.Format(time.RFC3339), seq, when)
	}
	return seq, nil
}

// committed is the newest committed checkpoint's number (0 if none).
func (r *run) committed() uint64 {
	seq, _, _, err := checkpoint.LatestCommit(r.flat.dir, nil)
	if err != nil {
		return 0
	}
	return seq
}

// working says the job makes progress: its cluster has formed and
// trained (its first push acknowledged), and, for a flat job, it is not
// stopped waiting for machines or starting again. The simulated job is
// not working during its start (start_seconds) either.
func (r *run) working() bool {
	return !(r.flat != nil && r.flat.down) && r.training()
}

// training says the running cluster has formed and trained.
func (r *run) training() bool {
	if r.cluster == nil {
		return false
	}
	select {
	case <-r.cluster.Training():
		return true
	default:
		return false
	}
}

func (r *run) failed() error {
	if r.cluster == nil {
		return errors.Join(r.err, r.prov.Err())
	}
	return errors.Join(r.err, r.prov.Err(), r.cluster.Err())
}

// finish gives back every machine at the job's end fin and fills the
// result.
func (r *run) finish(ctx context.Context, res Result, start, fin, wall0 time.Time) (Result, error) {
	r.prov.Trace().AdvanceTo(fin)
	c := r.mgr.Counts()
	st, stErr := r.cluster.StageHistory(ctx)
	// Counted before any machine is released: the servers hold the
	// audit table.
	var base map[int]int64
	if r.flat != nil {
		base = r.flat.resumed
	}
	if lost, err := r.cluster.UpdatesLost(ctx, base); err == nil {
		if r.flat != nil {
			lost += r.flat.Lost
		}
		n := float64(lost)
		res.UpdatesLost = &n
	} else if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "replay: %s: updates_lost not counted: %v\n", r.name, err)
	}
	for _, h := range r.mgr.Held() {
		if err := r.mgr.Release(ctx, h.ID); err != nil {
			return res, err
		}
	}
	bill, err := r.prov.Bill(ctx)
	if err != nil {
		return res, err
	}
	res.Dollars, res.Hours = bill.Dollars, fin.Sub(start).Hours()
	res.Evictions, res.Acquisitions = c.Evictions, c.Acquisitions
	res.FreeShare = replay.FreeShare(bill, r.cfg.Replay.Cal)
	if stErr == nil {
		res.StageSwitches = len(st.History)
		res.StageHistory = st.History
	}
	res.WallSeconds = r.cfg.Clock.Now().Sub(wall0).Seconds()
	res.PeakMachines = max(r.peak, r.cluster.Peak())
	if r.flat != nil {
		res.Restarts = r.flat.Restarts
		res.CheckpointRequests = r.checkpoints
		if saved, err := drill.CheckpointAudit(ctx, r.flat.dir); err == nil && saved.Pass >= 0 {
			res.CheckpointsCommitted = saved.Seq
		}
	}
	if m := r.cluster.Metrics(); m != nil {
		acc, auc := m["test_accuracy"], m["test_auc"]
		res.TestAccuracy, res.TestAUC = &acc, &auc
	}
	return res, r.failed()
}

// job is the real job as the manager sees it: its progress in passes,
// as rank 0 reports them, and for a flat job its last checkpoint.
type job struct {
	total  float64
	passes func() int
	of     int // passes asked for
	// ask asks the coordinator for a checkpoint and returns its number
	// (flat jobs only); now is the trace time; working says the job
	// makes progress (run.working; always before the cluster starts).
	ask     func(context.Context) (uint64, error)
	now     func() time.Time
	working func() bool
	// committed, when set, is the newest committed checkpoint's number:
	// the job then dates a checkpoint by its commit, as the simulated
	// job does, and asks for none while one is pending (BidBrain's
	// elastic design, whose last machines go only from a checkpoint
	// written within their release window: dated by the request, one
	// was released before the pass boundary that commits it, and the
	// restart rolled back 30 passes). Without it (checkpoint-restart)
	// a checkpoint is dated by its request.
	committed func() uint64
	// pending is the checkpoint asked for and not yet committed,
	// pendingDone the work done at the request.
	pending     uint64
	pendingDone float64
	// ckptAt is the last checkpoint's date (the job's start before the
	// first), ckptDone the work done then: the policy's interval runs
	// from it.
	ckptAt   time.Time
	ckptDone float64
}

func (j *job) Status() rm.JobStatus {
	if j.pending != 0 && j.committed() >= j.pending {
		j.pending, j.ckptDone = 0, j.pendingDone
		if j.now != nil {
			j.ckptAt = j.now()
		}
	}
	st := rm.JobStatus{Total: j.total, Working: j.working == nil || j.working(), Checkpointed: j.ckptDone, CheckpointAt: j.ckptAt}
	if j.passes != nil && j.of > 0 {
		st.Done = j.total * float64(j.passes()) / float64(j.of)
	}
	return st
}

// Checkpoint asks the running coordinator for a checkpoint (run.checkpoint:
// at the next pass boundary, or at once for the elastic design).
func (j *job) Checkpoint(ctx context.Context) error {
	if j.ask == nil {
		return fmt.Errorf("checkpoint %w", ErrNotReal)
	}
	if j.working != nil && !j.working() {
		return nil // nothing to save now
	}
	done := j.Status().Done
	if j.pending != 0 {
		return nil // one is under way
	}
	seq, err := j.ask(ctx)
	if err != nil {
		return err
	}
	if j.committed != nil {
		j.pending, j.pendingDone = seq, done
		return nil
	}
	if j.now != nil {
		j.ckptAt = j.now()
	}
	j.ckptDone = done
	return nil
}

// clusterMachines carries the provider's machines out on the cluster;
// once the job is done it starts nothing more (machines booted during
// the wind-down are released at once).
type clusterMachines struct {
	r    *run
	done bool
}

func class(c market.Class) drill.Role {
	if c == market.Reliable {
		return drill.Reliable
	}
	return drill.Transient
}

func (m *clusterMachines) Start(_ context.Context, c market.Class) (string, error) {
	switch {
	case m.done:
		return "", nil
	case m.r.flat != nil:
		return m.r.flat.start(m.machines())
	case m.r.cluster == nil:
		return "", nil
	}
	return m.r.cluster.StartMachine(class(c))
}

func (m *clusterMachines) Notice(_ context.Context, name string) error {
	if m.r.flat != nil {
		return m.r.flat.notice(m.machines(), name)
	}
	return m.machines().Notice(name)
}

func (m *clusterMachines) Kill(ctx context.Context, name string) error {
	if m.r.flat != nil {
		return m.stopIf(ctx)(m.r.flat.kill(m.machines(), name, m.r.prov.Now(), m.r.training()))
	}
	return m.machines().Kill(name)
}

func (m *clusterMachines) Drain(ctx context.Context, name string) error {
	if m.r.flat != nil {
		return m.stopIf(ctx)(m.r.flat.drain(m.machines(), name, m.r.training()))
	}
	return m.machines().Drain(name)
}

// machines is the running cluster, as the provider's events reach it.
func (m *clusterMachines) machines() cluster { return dropping{m.r.cluster} }

// dropping is a cluster that takes a machine it dropped before it
// started (noticed while it waited for the formation: the drill forgets
// it) as stopped already: its kill or drain at the end of its notice
// failed the replay ("no such machine").
type dropping struct{ *drill.Cluster }

func (c dropping) Notice(name string) error { return dropped(c.Cluster.Notice(name)) }
func (c dropping) Kill(name string) error   { return dropped(c.Cluster.Kill(name)) }
func (c dropping) Drain(name string) error  { return dropped(c.Cluster.Drain(name)) }

func dropped(err error) error {
	if errors.Is(err, drill.ErrUnknownMachine) {
		return nil
	}
	return err
}

// stopIf stops the flat job when a kill or a drain took its state.
func (m *clusterMachines) stopIf(ctx context.Context) func(bool, error) error {
	return func(lost bool, err error) error {
		if err != nil || !lost {
			return err
		}
		return m.r.stop(ctx)
	}
}
