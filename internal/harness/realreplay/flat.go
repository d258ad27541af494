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
// machine); the coordinator checkpoints at every pass boundary (the
// coordinator checkpoints on passes, not on the policy's clock). The
// first machine the provider takes stops the whole job: every process
// is killed, as a flat job without tiers loses its state with any
// server. Once the policy holds its footprint again, a new cluster
// resumes from the newest checkpoint on those machines.
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
	tmp      bool // dir is ours to remove
}

// configure turns the first cluster's configuration into a flat job's
// of need machines that checkpoints every pass.
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
	cc.CoordArgs = append(slices.Clone(cc.CoordArgs), "--checkpoint-dir", f.dir, "--checkpoint-every", "1")
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

// kill takes a machine away: the job stops, every process killed.
func (f *flat) kill(c *drill.Cluster, alias string) error {
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
	cc.CoordArgs = append(slices.Clone(cc.CoordArgs), "--resume")
	c, err := drill.StartCluster(ctx, cc)
	if err != nil {
		return fmt.Errorf("restart %d from the checkpoint: %w", f.Restarts, err)
	}
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
		fmt.Fprintf(r.cfg.Progress, "replay: %s restarted from the checkpoint on %d machines (restart %d)\n", r.name, len(aliases), f.Restarts)
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
