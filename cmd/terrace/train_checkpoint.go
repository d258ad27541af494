package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/harness/drill"
)

// processCheckpoints are train's checkpoint flags for a cluster of
// processes (--processes): the coordinators take them (--checkpoint-dir,
// --checkpoint-every, --checkpoint-keep, --resume), as a cluster started
// by hand would.
type processCheckpoints struct {
	dir          string
	every, keep  int
	resume       bool
	onCopiesLost coord.CopiesLostPolicy
}

// newProcessCheckpoints checks the flags as train without --processes
// does: --resume DIR alone names the directory too.
func newProcessCheckpoints(dir string, every, keep int, resumeDir, onCopiesLost string) (processCheckpoints, error) {
	if resumeDir != "" && dir == "" {
		dir = resumeDir
	}
	if resumeDir != "" && resumeDir != dir {
		return processCheckpoints{}, fmt.Errorf("--resume %s and --checkpoint-dir %s: a cluster of processes resumes from its checkpoint directory; give one of them", resumeDir, dir)
	}
	if err := checkCheckpointFlags(dir, every, keep, resumeDir != ""); err != nil {
		return processCheckpoints{}, err
	}
	policy, err := checkOnCopiesLost(onCopiesLost, dir)
	if err != nil {
		return processCheckpoints{}, err
	}
	return processCheckpoints{dir: dir, every: every, keep: keep, resume: resumeDir != "", onCopiesLost: policy}, nil
}

// apply gives the coordinators the flags and, for a resumed job, gives
// the drill's audit what the checkpoint's audit table holds: the servers
// start with those counts, so they count as acknowledged (otherwise the
// audit would report them as updates applied twice).
func (p processCheckpoints) apply(ctx context.Context, out io.Writer, cfg *drill.Config) error {
	if p.dir == "" {
		return nil
	}
	cfg.CoordArgs = append(cfg.CoordArgs, "--checkpoint-dir", p.dir, "--checkpoint-every", strconv.Itoa(p.every),
		"--checkpoint-keep", strconv.Itoa(p.keep), "--on-copies-lost", string(p.onCopiesLost))
	if !p.resume {
		return nil
	}
	cfg.CoordArgs = append(cfg.CoordArgs, "--resume")
	saved, err := drill.CheckpointAudit(ctx, p.dir)
	if errors.Is(err, drill.ErrNoAuditTable) {
		return fmt.Errorf("--resume %s with --processes: %w (it was written by a train without --processes or --audit, and the drill's audit would count its passes as skipped); resume it without --processes", p.dir, err)
	}
	if err != nil {
		return fmt.Errorf("--resume %s: %w", p.dir, err)
	}
	if saved.Pass < 0 {
		return fmt.Errorf("--resume %s: no committed checkpoint there", p.dir)
	}
	cfg.AuditBase = saved.ByRank
	fmt.Fprintf(out, "terrace: resuming from checkpoint %d (after pass %d; %d acknowledged updates saved)\n", saved.Seq, saved.Pass+1, saved.Total())
	return nil
}
