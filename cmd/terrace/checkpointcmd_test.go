package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestCheckpointSteps: terrace checkpoint --wait reads its checkpoint's
// fate from the status, and never waits on one that cannot come.
func TestCheckpointSteps(t *testing.T) {
	running := &api.JobStatus{}
	for _, tc := range []struct {
		name     string
		ck       *api.CheckpointStatus
		job      *api.JobStatus
		finished bool
		err      error
		what     string
	}{
		{"no checkpoint directory", nil, running, true, errCheckpointNever, ""},
		{"pass boundary ahead", &api.CheckpointStatus{Seq: 2, Requested: true, Committed: 2}, running, false, nil, "waiting for pass 4 to end (1/4 partitions)"},
		{"writing", &api.CheckpointStatus{Seq: 3, InProgress: true, Pass: 2, Servers: 2, Written: 1, Committed: 2}, running, false, nil, "checkpoint 3 after pass 3: servers writing 1/2"},
		{"writing inside a pass", &api.CheckpointStatus{Seq: 3, InProgress: true, Inside: true, Pass: 2, Servers: 2, Written: 1, Committed: 2}, running, false, nil, "checkpoint 3 inside pass 4: servers writing 1/2"},
		{"committed", &api.CheckpointStatus{Seq: 3, Committed: 3}, running, true, nil, ""},
		{"a later one committed", &api.CheckpointStatus{Seq: 5, Committed: 5}, running, true, nil, ""},
		{"abandoned", &api.CheckpointStatus{Seq: 3, Committed: 2, Abandoned: 3, Why: "disk full"}, running, true, errCheckpointAbandoned, ""},
		{"dropped by a next job", &api.CheckpointStatus{Seq: 2, Committed: 2}, running, true, errCheckpointNever, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &api.Status{Checkpoint: tc.ck, Definition: tc.job, Job: api.Progress{Pass: 3, Partitions: 4, Done: 1}}
			step, finished, err := stepOf(st, 3)
			if finished != tc.finished || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("finished %v, err %v; want %v, %v", finished, err, tc.finished, tc.err)
			}
			if !strings.Contains(step.what, tc.what) {
				t.Errorf("step %q, want it to say %q", step.what, tc.what)
			}
		})
	}
}

// TestCheckpointNowBeforeJob: terrace checkpoint --now before any job has
// tables is refused, naming why, and exits 1. It committed a checkpoint
// of no tables and no job, which a resume would take as the newest; with
// no server joined yet, --wait waited for good ("servers writing 0/0").
func TestCheckpointNowBeforeJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	addr := startCoordinator(t, ctx, "--in-memory", "--servers", "1", "--workers", "1", "--replication", "1", "--checkpoint-dir", dir)
	out, err := exec.CommandContext(ctx, terrace(t), "checkpoint", "--coordinator", addr, "--now", "--wait").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "no tables yet") {
		t.Fatalf("checkpoint --now before any job: %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("checkpoint directory after the refusal holds %d entries", len(ents))
	}
}

// TestCheckpointTimeoutTooShort: a --timeout too short to ask for the
// checkpoint is named as the cause. --timeout 1ms said the live
// coordinator "accepts connections but does not answer".
func TestCheckpointTimeoutTooShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	addr := startCoordinator(t, ctx, "--in-memory", "--servers", "1", "--workers", "1", "--replication", "1", "--checkpoint-dir", t.TempDir())
	for _, d := range []string{"1ns", "1ms"} {
		out, err := exec.CommandContext(ctx, terrace(t), "checkpoint", "--coordinator", addr, "--wait", "--timeout", d).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "within --timeout "+d) || strings.Contains(string(out), "does not answer") {
			t.Fatalf("checkpoint --wait --timeout %s: %v\n%s", d, err, out)
		}
	}
}
