package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/harness/straggle"
)

// TestReassignAcrossProcesses runs the straggler drill with every node
// its own process: one worker 4 times slower, SSP(128), reassignment on.
// Peer hints cross processes only through the workers' peer endpoints
// (internal/process/peernet), and a worker takes a tail only on a peer's
// progress it heard: reassignments > 0 proves hints crossed. The audit
// must find no example repeated or skipped. About 15 s and seven
// processes: TERRACE_PEERS_DRILL=1 runs it (.ci/run does).
func TestReassignAcrossProcesses(t *testing.T) {
	if os.Getenv("TERRACE_PEERS_DRILL") == "" {
		t.Skip("set TERRACE_PEERS_DRILL=1 to run the straggler drill across seven processes")
	}
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	args := []string{"train", "--processes", "--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"),
		"--run-dir", filepath.Join(dir, "run"), "--report", report, "--timeout", "2m",
		"--workers", "4", "--servers", "2", "--passes", "3", "--consistency", "ssp:128",
		"--straggle", "one:4x", "--straggle-work", "100us", "--reassign"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, terrace(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("terrace %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var rep struct {
		Reassignments      int64  `json:"reassignments"`
		ExamplesReassigned int64  `json:"examples_reassigned"`
		ExamplesRepeated   *int64 `json:"examples_repeated"`
		ExamplesSkipped    *int64 `json:"examples_skipped"`
		AckedUpdatesLost   *int64 `json:"acked_updates_lost"`
		Workers            map[string]struct {
			Peers *struct {
				Received, Refused int64
			} `json:"peer_messages"`
		} `json:"workers"`
	}
	b, err := os.ReadFile(report)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	if rep.ExamplesRepeated == nil || *rep.ExamplesRepeated != 0 || rep.ExamplesSkipped == nil || *rep.ExamplesSkipped != 0 || rep.AckedUpdatesLost == nil || *rep.AckedUpdatesLost != 0 {
		t.Errorf("audit: repeated %v, skipped %v, acked updates lost %v; want 0", ptr(rep.ExamplesRepeated), ptr(rep.ExamplesSkipped), ptr(rep.AckedUpdatesLost))
	}
	if len(rep.Workers) != 4 {
		t.Fatalf("%d worker reports, want 4", len(rep.Workers))
	}
	for rank, w := range rep.Workers {
		if w.Peers == nil || w.Peers.Received == 0 || w.Peers.Refused != 0 {
			t.Errorf("rank %s: peer messages %+v", rank, w.Peers)
		}
	}
	if rep.Reassignments == 0 || rep.ExamplesReassigned == 0 {
		t.Errorf("reassignments %d, examples reassigned %d: no tail moved across processes", rep.Reassignments, rep.ExamplesReassigned)
	}
}

// TestSlowedWorkerSays: the worker a one: or machine: pattern picks says
// so in its log, and no other does.
func TestSlowedWorkerSays(t *testing.T) {
	one, err := straggle.Parse("one:4x")
	if err != nil {
		t.Fatal(err)
	}
	random, _ := straggle.Parse("random:3x")
	victim := straggle.Victim(1, 4)
	for rank := range 4 {
		if got := slowedWorker(one, 1, rank, 4); (got != "") != (rank == victim) {
			t.Errorf("one:4x, rank %d of 4 (victim %d): %q", rank, victim, got)
		}
		if got := slowedWorker(random, 1, rank, 4); got != "" {
			t.Errorf("random:3x, rank %d: %q, want nothing (every worker is slowed in turn)", rank, got)
		}
	}
}
