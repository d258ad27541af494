package realreplay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCheck: the policies not wired to processes are refused by name,
// an unknown one with the policy package's own error.
func TestCheck(t *testing.T) {
	for _, name := range []string{"ondemand", "tiers", "checkpoint"} {
		if err := Check(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"bidbrain"} {
		if err := Check(name); !errors.Is(err, ErrNotReal) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want ErrNotReal naming it", name, err)
		}
	}
	if err := Check("greedy"); err == nil || errors.Is(err, ErrNotReal) {
		t.Errorf("unknown policy: %v", err)
	}
}

// TestJobProgress: the job's progress is rank 0's passes.
func TestJobProgress(t *testing.T) {
	j := &job{total: 4000, of: 10}
	if st := j.Status(); st.Done != 0 || st.Total != 4000 || !st.Working {
		t.Errorf("before the cluster: %+v", st)
	}
	j.passes = func() int { return 3 }
	if st := j.Status(); st.Done != 1200 {
		t.Errorf("3 of 10 passes: done %v, want 1200", st.Done)
	}
}

// TestJobCheckpoint: checkpoint-restart's job asks the coordinator when
// the policy says so and dates its last checkpoint by the request, so
// that the policy's interval runs from it; while the job is down (or not
// yet training) it is not working and asks nothing.
func TestJobCheckpoint(t *testing.T) {
	start := time.Date(2015, 3, 2, 0, 0, 0, 0, time.UTC)
	now, down, asked := start, false, 0
	j := &job{total: 4000, of: 10, ckptAt: start, passes: func() int { return 3 },
		ask: func(context.Context) error { asked++; return nil }, now: func() time.Time { return now }, working: func() bool { return !down }}
	if st := j.Status(); !st.CheckpointAt.Equal(start) || !st.Working {
		t.Fatalf("at the start: %+v", st)
	}
	now = start.Add(25 * time.Minute)
	if err := j.Checkpoint(context.Background()); err != nil || asked != 1 {
		t.Fatalf("checkpoint: %v, %d requests", err, asked)
	}
	if st := j.Status(); !st.CheckpointAt.Equal(now) || st.Checkpointed != 1200 {
		t.Errorf("after the request: checkpoint at %v with %v done, want %v and 1200", st.CheckpointAt, st.Checkpointed, now)
	}
	down = true
	if err := j.Checkpoint(context.Background()); err != nil || asked != 1 || j.Status().Working {
		t.Errorf("while down: %v, %d requests, working %v", err, asked, j.Status().Working)
	}
	if err := (&job{}).Checkpoint(context.Background()); !errors.Is(err, ErrNotReal) {
		t.Errorf("a job that cannot checkpoint: %v", err)
	}
}
