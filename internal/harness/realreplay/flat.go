package realreplay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/internal/harness/drill"
)

// flat is a job without tiers on the processes (docs/design/market.md,
// "The local provider and the real replay" and "The elastic design on
// processes"): checkpoint-restart, or BidBrain's elastic design. Every
// machine is a server and workers with no tiers (the drill's reliable
// class: without tiers the class means nothing to the system, whatever
// the market calls the machine); the coordinator checkpoints when the
// policy asks (job.Checkpoint: POST /v1/checkpoint, taken at the next
// pass boundary).
//
// Checkpoint-restart: the first machine the provider takes stops the
// whole job: every process is killed, as a flat job that does not use
// the notice loses its state with any server, and the work acknowledged
// since the newest committed checkpoint is counted as lost. Once the
// policy holds its footprint (need) again, a new cluster resumes from
// that checkpoint on those machines.
//
// Elastic: a machine on notice drains (the coordinator takes its slots
// off it), one released drains, one killed is just killed while other
// machines hold the state (its chains' other copies keep its slots,
// after the failure timeout). A notice that leaves fewer servers than
// the chains' length (the last server's among them) makes the
// coordinator checkpoint inside the pass at once (docs/design/
// resilience.md, "Checkpoints inside a pass"), so a total loss at the
// notice's end rolls back to it if it was committed in time. The job's state is lost, and the job
// stopped and rolled back as above, when the last machine goes (killed,
// or released: the last server cannot drain), when k machines are
// killed in the same instant (chains of k), or when a machine of the
// cluster's formation goes before it has formed. It starts, and
// restarts, as soon as one machine not on notice is held, formed with
// every such machine and chains of the calibration's k (every machine
// while fewer are on the ring: the chains grow to k as machines join);
// machines bought while it runs join it.
type flat struct {
	dir  string              // the checkpoints, shared by every cluster
	base drill.ClusterConfig // the first cluster's
	need int                 // machines a restart waits for
	// elastic is BidBrain's elastic design; k its chains' length.
	elastic bool
	k       int
	// held maps the provider's name for a machine to the machine in
	// the running cluster. The provider keeps its names across
	// restarts; clusters name anew.
	held map[string]*machine
	next int
	// servers is the running cluster's formation, started its machines
	// started so far.
	servers, started int
	// killedAt is the trace time of the last kill, killed how many
	// machines were killed then.
	killedAt time.Time
	killed   int
	down     bool
	// over: the job has trained to the end; its machines are given
	// back, the last one too, with nothing to save.
	over   bool
	passes int // rank 0's passes before the last stop
	// inside: the checkpoint the job rolls back to was taken inside a
	// pass (the coordinator's, at a notice that left fewer servers than
	// the chains' length).
	inside bool
	// Restarts counts the job's restarts from a checkpoint.
	Restarts int
	// Lost counts the acknowledged updates the restarts rolled back.
	Lost int64
	// resumed is what the running cluster's audit table started with:
	// the checkpoint it resumed from (nil for the first cluster, or a
	// restart with no checkpoint to resume from).
	resumed map[int]int64
	tmp     bool // dir is ours to remove
}

// machine is one machine the provider holds for a flat job.
type machine struct {
	name      string // in the running cluster; "" while the job is down
	noticed   bool
	formation bool // one of the running cluster's first servers
}

// cluster is what flat does to the running cluster's machines
// (*drill.Cluster).
type cluster interface {
	StartMachine(class drill.Role) (string, error)
	Notice(name string) error
	Kill(name string) error
	Drain(name string) error
}

// configure turns the first cluster's configuration into a flat job's
// that checkpoints when the policy asks (no --checkpoint-every: the
// coordinator takes none of its own). A checkpoint-restart job forms
// with need machines; an elastic one waits for its first (the job starts
// down: restart forms it).
func (f *flat) configure(cc drill.ClusterConfig, need int) (drill.ClusterConfig, error) {
	if f.elastic {
		need, f.down = 1, true
	}
	if need <= 0 {
		return cc, fmt.Errorf("checkpoint: no machine in the first plan")
	}
	if cc.RunDir != "" {
		f.dir = filepath.Join(cc.RunDir, "checkpoints")
		if err := os.MkdirAll(f.dir, 0o755); err != nil {
			return cc, err
		}
	} else {
		dir, err := os.MkdirTemp("", "terrace-replay-checkpoints-")
		if err != nil {
			return cc, err
		}
		f.dir, f.tmp = dir, true
	}
	per := max(1, cc.WorkersPerMachine)
	f.need, f.servers = need, need
	cc.Servers, cc.Workers, cc.Stage = need, need*per, ""
	cc.CoordArgs = append(slices.Clone(cc.CoordArgs), "--checkpoint-dir", f.dir)
	f.base = cc
	return cc, nil
}

// close removes a temporary checkpoint directory.
func (f *flat) close() {
	if f.tmp {
		os.RemoveAll(f.dir)
	}
}

// start runs a machine that came up: at once if the job runs, else at
// the next restart.
func (f *flat) start(c cluster) (string, error) {
	alias := fmt.Sprintf("machine-%d", f.next)
	f.next++
	m := &machine{}
	f.held[alias] = m
	if f.down {
		return alias, nil
	}
	return alias, f.run(c, m)
}

// run starts m in the running cluster.
func (f *flat) run(c cluster, m *machine) error {
	name, err := c.StartMachine(drill.Reliable)
	if err != nil {
		return err
	}
	m.name, m.formation = name, f.started < f.servers
	f.started++
	return nil
}

// notice passes an eviction notice to an elastic job's machine, which
// drains; checkpoint-restart does not use it.
func (f *flat) notice(c cluster, alias string) error {
	m := f.held[alias]
	if !f.elastic || m == nil {
		return nil
	}
	m.noticed = true
	if m.name == "" {
		return nil
	}
	return c.Notice(m.name)
}

// kill takes a machine away at trace time at (training: the running
// cluster has formed). It says whether the job's state went with it: the
// caller then stops the job (stop).
func (f *flat) kill(c cluster, alias string, at time.Time, training bool) (bool, error) {
	m := f.take(alias)
	if m == nil {
		return false, nil
	}
	if !at.Equal(f.killedAt) {
		f.killedAt, f.killed = at, 0
	}
	f.killed++
	if !f.elastic || f.alone(m, training) || training && f.killed >= f.k {
		return true, f.killAll(c, m.name)
	}
	return false, c.Kill(m.name)
}

// drain releases a machine the policy gives back; it says, as kill
// does, whether the job's state went with it (an elastic job's last
// machine: the last server cannot drain).
func (f *flat) drain(c cluster, alias string, training bool) (bool, error) {
	m := f.take(alias)
	if m == nil {
		return false, nil
	}
	if f.elastic && !f.over && f.alone(m, training) {
		return true, f.killAll(c, m.name)
	}
	return false, c.Drain(m.name)
}

// take forgets the machine alias and returns it if it runs in the
// running cluster.
func (f *flat) take(alias string) *machine {
	m := f.held[alias]
	delete(f.held, alias)
	if f.down || m == nil || m.name == "" {
		return nil
	}
	return m
}

// alone says the job cannot go on without m: no other machine of the
// running cluster holds the state once training runs, or, before, m is
// one of the servers the cluster forms with.
func (f *flat) alone(m *machine, training bool) bool {
	if !training {
		return m.formation
	}
	for _, o := range f.held {
		if o.name != "" {
			return false
		}
	}
	return true
}

// killAll kills every process of the job, name last, and marks it down.
func (f *flat) killAll(c cluster, name string) error {
	for _, m := range f.held {
		if m.name != "" {
			// Killed first, so that Close finds nothing left to drain.
			if err := c.Kill(m.name); err != nil {
				return err
			}
		}
		m.name = ""
	}
	f.down = true
	return c.Kill(name)
}

// ready lists, in name order, the machines a restart runs on (none on
// notice), or nil while the job runs or waits for more machines.
func (f *flat) ready() []string {
	if !f.down {
		return nil
	}
	var out []string
	for a, m := range f.held {
		if !m.noticed {
			out = append(out, a)
		}
	}
	if len(out) < f.need {
		return nil
	}
	slices.Sort(out)
	return out
}

// stop ends the stopped job's cluster (its processes killed by kill or
// drain) and counts what a restart rolls back.
func (r *run) stop(ctx context.Context) error {
	f := r.flat
	f.passes = max(f.passes, r.cluster.Passes())
	r.job.pending = 0 // asked of a coordinator that is gone
	r.cluster.Close()
	return f.rollBack(ctx, r.cluster)
}

// rollBack counts what a restart from the newest committed checkpoint
// loses, once every process of the stopped cluster has exited: the
// updates its workers' audit logs say were acknowledged (plus what the
// cluster resumed with) beyond those the checkpoint's audit table holds.
func (f *flat) rollBack(ctx context.Context, c *drill.Cluster) error {
	acked := map[int]int64{}
	for _, l := range c.AuditLogs() {
		acked[l.Rank] += l.Acked
	}
	saved, err := drill.CheckpointAudit(ctx, f.dir)
	if err != nil {
		return err
	}
	f.Lost += drill.RolledBack(f.resumed, acked, saved)
	f.rollTo(saved)
	return nil
}

// rollTo moves the job's progress back to saved, the checkpoint a restart
// resumes from (as the simulated job's goes back at a crash): from
// scratch if none was committed. One taken inside the first pass has no
// pass complete and is resumed all the same.
func (f *flat) rollTo(saved drill.Saved) {
	f.passes, f.resumed, f.inside = saved.Pass+1, nil, saved.Inside
	if saved.Seq > 0 {
		f.resumed = saved.ByRank
	}
}

// restart starts a new cluster that resumes from the newest checkpoint
// once the job is down and its machines are up again (an elastic job:
// one machine not on notice), formed with every such machine; an
// elastic job's first cluster starts so too.
func (r *run) restart(ctx context.Context) error {
	f := r.flat
	if f == nil {
		return nil
	}
	aliases := f.ready()
	if aliases == nil {
		return nil
	}
	first := r.cluster == nil
	cc := f.base
	if f.elastic {
		per := max(1, cc.WorkersPerMachine)
		cc.Servers, cc.Workers = len(aliases), len(aliases)*per
		cc.Replication = f.k
	}
	if !first {
		// Under the first cluster's directory, a temporary one too.
		f.Restarts++
		cc.RunDir = filepath.Join(r.runDir, fmt.Sprintf("restart-%d", f.Restarts))
	}
	if f.resumed != nil {
		// With no committed checkpoint the job starts again from
		// scratch: everything it did was rolled back.
		cc.CoordArgs = append(slices.Clone(cc.CoordArgs), "--resume")
	}
	c, err := drill.StartCluster(ctx, cc)
	if err != nil {
		return fmt.Errorf("restart %d from the checkpoint: %w", f.Restarts, err)
	}
	if first {
		r.runDir = c.RunDir()
	} else {
		r.peak = max(r.peak, r.cluster.Peak())
		r.cluster.Close()
	}
	r.cluster = c
	f.down, f.servers, f.started = false, cc.Servers, 0
	for _, a := range aliases {
		if err := f.run(c, f.held[a]); err != nil {
			return err
		}
	}
	switch {
	case r.cfg.Progress == nil:
	case first:
		fmt.Fprintf(r.cfg.Progress, "replay: %s started on %d machine(s) (chains of %d)\n", r.name, len(aliases), cc.Replication)
	default:
		from := fmt.Sprintf("from the checkpoint after pass %d", f.passes)
		if f.inside {
			from = fmt.Sprintf("from the checkpoint inside pass %d", f.passes+1)
		}
		if f.resumed == nil {
			from = "from scratch (no checkpoint committed)"
		}
		fmt.Fprintf(r.cfg.Progress, "replay: %s restarted %s on %d machine(s) (restart %d; %d acknowledged updates rolled back so far)\n", r.name, from, len(aliases), f.Restarts, f.Lost)
	}
	return nil
}

// passes is rank 0's passes, across restarts.
func (r *run) passes() int {
	if r.flat == nil {
		return r.cluster.Passes()
	}
	if r.flat.down {
		return r.flat.passes
	}
	return max(r.flat.passes, r.cluster.Passes())
}

// finished is closed when the job has trained to the end (nil while a
// flat job is down).
func (r *run) finished() <-chan struct{} {
	if r.flat != nil && r.flat.down {
		return nil
	}
	return r.cluster.Finished()
}
