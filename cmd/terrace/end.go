package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// endLinger is how long a coordinator that ends with its job keeps
// answering after the end, so that its servers' long-polls learn of it
// and they exit by themselves.
const endLinger = 500 * time.Millisecond

// checkCluster refuses a cluster that cannot hold its keys.
func checkCluster(servers, workers, replication int) error {
	switch {
	case servers < 1:
		return fmt.Errorf("--servers %d: need at least 1", servers)
	case workers < 1:
		return fmt.Errorf("--workers %d: need at least 1", workers)
	case replication < 1:
		return fmt.Errorf("--replication %d: every key needs at least 1 copy", replication)
	case replication > servers:
		return fmt.Errorf("--replication %d with --servers %d: each key would need more copies than there are servers", replication, servers)
	}
	return nil
}

// checkCoordinatorCluster is checkCluster for a coordinator, whose
// cluster grows as servers join after it forms. Without tiers a
// --replication above --servers is taken: chains hold every server on
// the ring until k do, and grow to k as servers join (a job that starts
// on one machine and adds more; with --replication 1 it would hold one
// copy of everything for good). With tiers it is refused as train
// refuses it: a stage counts its ActivePS lost against k.
func checkCoordinatorCluster(servers, workers, replication int, tiered bool) error {
	if !tiered && servers >= 1 && replication > servers {
		replication = servers
	}
	return checkCluster(servers, workers, replication)
}

// tierReplication is the k of a cluster of reliable and transient
// machines, each one server: one given (changed) is checked, the default
// capped at the machines, as a cluster of servers caps it. Passed on
// uncapped, the default 2 on one machine (train --processes --reliable 1
// --transient 0 --stage 1, plan --measure of it) made the coordinator
// exit at start.
func tierReplication(changed bool, replication, reliable, transient int) (int, error) {
	if changed {
		return replication, checkTierReplication(replication, reliable, transient)
	}
	return max(1, min(replication, reliable+transient)), nil
}

// checkTierReplication refuses a --replication given above the servers
// of a cluster on machines of two classes, each of which runs one server,
// as checkCluster refuses it above --servers.
func checkTierReplication(replication, reliable, transient int) error {
	switch servers := reliable + transient; {
	case replication < 1:
		return fmt.Errorf("--replication %d: every key needs at least 1 copy", replication)
	case replication > servers:
		return fmt.Errorf("--replication %d with --reliable %d --transient %d: each key would need more copies than there are servers (%d, one a machine)", replication, reliable, transient, servers)
	}
	return nil
}

// maxLocalNodes bounds the servers, and the workers, of a cluster that
// train starts on this host. At 400 servers one pass of a9a took 7 s; at
// 2,000 the cluster did not form in 100 s and took 26 s to stop after
// Ctrl-C; at 1,000,000 it grew past a gigabyte and no signal stopped it.
const maxLocalNodes = 256

// checkLocalCluster refuses a cluster too large for one host.
func checkLocalCluster(servers, workers int) error {
	switch {
	case servers > maxLocalNodes:
		return fmt.Errorf("--servers %d: a cluster on this host takes at most %d (start servers as processes of their own, on several hosts, for more)", servers, maxLocalNodes)
	case workers > maxLocalNodes:
		return fmt.Errorf("--workers %d: a cluster on this host takes at most %d (start workers as processes of their own, on several hosts, for more)", workers, maxLocalNodes)
	}
	return nil
}

// checkCoordination refuses what the coordinator would take silently as
// its default: a negative partition count, a failure timeout that is not
// positive.
func checkCoordination(partitions int, failAfter time.Duration) error {
	switch {
	case partitions < 0:
		return fmt.Errorf("--partitions %d: want 0 (4 per worker) or more", partitions)
	case failAfter <= 0:
		return fmt.Errorf("--failure-timeout %v: want a positive duration", failAfter)
	}
	return nil
}

// jobProgress prints each pass's evaluation once, as the coordinator
// receives it.
type jobProgress struct {
	job     uint64
	printed []int
	led     bool
}

// lead starts p at a coordinator's first term in this process: the passes
// evaluated before it (by this coordinator before a restart on its
// --etcd-dir, or by another that led) are said in one line instead of
// one line each, printed again as if new. Passes restored from a
// checkpoint are left to show, which says so.
func (p *jobProgress) lead(w io.Writer, st api.JobStatus) {
	if p.led {
		return
	}
	p.led, p.job = true, st.Number
	var before []int
	for _, r := range st.Results {
		if !r.Restored {
			before = append(before, r.Pass)
		}
	}
	p.printed = append(p.printed, before...)
	switch n := len(before); {
	case n == 1:
		fmt.Fprintf(w, "terrace coordinator: pass %d of job %d was evaluated before this coordinator led (terrace status --json has its metrics)\n", before[0], st.Number)
	case n > 1:
		fmt.Fprintf(w, "terrace coordinator: %d passes (%d-%d) of job %d were evaluated before this coordinator led (terrace status --json has their metrics)\n", n, before[0], before[n-1], st.Number)
	}
}

func (p *jobProgress) show(w io.Writer, st api.JobStatus) {
	if st.Number != p.job { // the next job on a cluster that stayed up
		p.job, p.printed = st.Number, nil
	}
	var restored []int // consecutive restored passes, printed as one line
	flush := func() {
		switch n := len(restored); {
		case n == 1:
			fmt.Fprintf(w, "terrace coordinator: pass %d restored from the checkpoint (evaluated in the run that trained it)\n", restored[0])
		case n > 1:
			fmt.Fprintf(w, "terrace coordinator: passes %d-%d restored from the checkpoint (evaluated in the run that trained them)\n", restored[0], restored[n-1])
		}
		restored = restored[:0]
	}
	for _, r := range st.Results {
		if slices.Contains(p.printed, r.Pass) {
			continue
		}
		p.printed = append(p.printed, r.Pass)
		if r.Restored {
			restored = append(restored, r.Pass)
			continue
		}
		flush()
		fmt.Fprintf(w, "terrace coordinator: pass %d evaluated by rank %d:%s\n", r.Pass, r.Rank, metricsLine(r))
	}
	flush()
}

func metricsLine(r api.PassResult) string {
	keys := []string{"test_accuracy", "test_logloss", "test_auc", "test_rmse", "train_loglik_per_token", "test_perplexity"}
	s := ""
	for _, k := range keys {
		if v, ok := r.Metrics[k]; ok {
			s += fmt.Sprintf("  %s %.4f", k, v)
		}
	}
	if a := r.Examples; a != nil && (a.Repeated > 0 || a.Skipped > 0) {
		s += fmt.Sprintf("  examples repeated %d, skipped %d", a.Repeated, a.Skipped)
	}
	if r.Late {
		s += "  (late: its first evaluator was lost)"
	}
	return s
}
