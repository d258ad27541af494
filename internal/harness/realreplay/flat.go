package realreplay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/terrace-ml/terrace/internal/harness/drill"
)

// flat is checkpoint-restart on the processes (docs/design/market.md,
// "The local provider and the real replay"). Every machine is a server
// and workers with no tiers (the drill's reliable class: without tiers
// the class means nothing to the system, whatever the market calls the
// machine); the coordinator checkpoints when the policy asks, at its
// interval (job.Checkpoint: POST /v1/checkpoint, taken at the next pass
// boundary). The first machine the provider takes stops the whole job:
// every process is killed, as a flat job without tiers loses its state
// with any server, and the work acknowledged since the newest committed
// checkpoint is counted as lost. Once the policy holds its footprint
// again, a new cluster resumes from that checkpoint on those machines.
type flat struct {
	dir  string              // the checkpoints, shared by every cluster
	base drill.ClusterConfig // the first cluster's
	need int                 // machines the job runs with
	// aliases maps the provider's name for a machine to the machine's
	// name in the running cluster ("" while the job is down). The
	// provider keeps its names across restarts; clusters name anew.
	aliases map[string]string
	next    int
	down    bool
	passes  int // rank 0's passes before the last stop
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

// configure turns the first cluster's configuration into a flat job's
// of need machines that checkpoints when the policy asks (no
// --checkpoint-every: the coordinator takes none of its own).
func (f *flat) configure(cc drill.ClusterConfig, need int) (drill.ClusterConfig, error) {
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
	f.need = need
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
func (f *flat) start(c *drill.Cluster) (string, error) {
	alias := fmt.Sprintf("machine-%d", f.next)
	f.next++
	f.aliases[alias] = ""
	if f.down {
		return alias, nil
	}
	name, err := c.StartMachine(drill.Reliable)
	if err != nil {
		return "", err
	}
	f.aliases[alias] = name
	return alias, nil
}

// kill takes a machine away: the job stops, every process killed, and
// the work acknowledged since the newest committed checkpoint is lost.
func (f *flat) kill(ctx context.Context, c *drill.Cluster, alias string) error {
	name := f.aliases[alias]
	delete(f.aliases, alias)
	if f.down || name == "" {
		return nil
	}
	f.passes = max(f.passes, c.Passes())
	for a, n := range f.aliases {
		if n != "" {
			// Killed first, so that Close finds nothing left to drain.
			if err := c.Kill(n); err != nil {
				return err
			}
		}
		f.aliases[a] = ""
	}
	if err := c.Kill(name); err != nil {
		return err
	}
	c.Close()
	f.down = true
	return f.rollBack(ctx, c)
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
	// The job's progress goes back to the checkpoint, as the simulated
	// job's does at a crash.
	f.passes, f.resumed = saved.Pass+1, nil
	if saved.Pass >= 0 {
		f.resumed = saved.ByRank
	}
	return nil
}

// drain releases a machine the policy gives back.
func (f *flat) drain(c *drill.Cluster, alias string) error {
	name := f.aliases[alias]
	delete(f.aliases, alias)
	if f.down || name == "" {
		return nil
	}
	return c.Drain(name)
}

// restart starts a new cluster that resumes from the newest checkpoint
// once the job is down and its machines are up again.
func (r *run) restart(ctx context.Context) error {
	f := r.flat
	if f == nil || !f.down || len(f.aliases) < f.need {
		return nil
	}
	f.Restarts++
	cc := f.base
	if cc.RunDir != "" {
		cc.RunDir = filepath.Join(cc.RunDir, fmt.Sprintf("restart-%d", f.Restarts))
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
	r.peak = max(r.peak, r.cluster.Peak())
	r.cluster.Close()
	r.cluster = c
	aliases := make([]string, 0, len(f.aliases))
	for a := range f.aliases {
		aliases = append(aliases, a)
	}
	slices.Sort(aliases)
	for _, a := range aliases {
		name, err := c.StartMachine(drill.Reliable)
		if err != nil {
			return err
		}
		f.aliases[a] = name
	}
	f.down = false
	if r.cfg.Progress != nil {
		from := fmt.Sprintf("from the checkpoint after pass %d", f.passes)
		if f.resumed == nil {
			from = "from scratch (no checkpoint committed)"
		}
		fmt.Fprintf(r.cfg.Progress, "replay: %s restarted %s on %d machines (restart %d; %d acknowledged updates rolled back so far)\n", r.name, from, len(aliases), f.Restarts, f.Lost)
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
