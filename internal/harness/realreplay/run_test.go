package realreplay

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market/jobsim"
)

// TestCheck: every policy runs for real; an unknown one is refused with
// the policy package's own error.
func TestCheck(t *testing.T) {
	for _, name := range []string{"ondemand", "tiers", "checkpoint", "bidbrain"} {
		if err := Check(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := Check("greedy"); err == nil || errors.Is(err, ErrNotReal) {
		t.Errorf("unknown policy: %v", err)
	}
}

// TestBound: a policy is refused when the machines it may run at once
// exceed MaxMachines, naming the calibration fields that set the count;
// for BidBrain that is reliable_machines and twice max_machines (a
// released or noticed machine runs beside its replacement), whatever
// machines says.
func TestBound(t *testing.T) {
	load := func(name string) jobsim.Calibration {
		c, err := jobsim.LoadCalibration(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	local, bb := load("local-lr-a9a.json"), load("local-lr-a9a-bidbrain.json")
	for _, c := range []struct {
		policy, design string
		cal            jobsim.Calibration
		want           int
		fields         string // named in the refusal; "" if it runs
	}{
		{"tiers", "auto", local, 3, ""},
		{"bidbrain", "auto", local, 9, "reliable_machines 1 and twice max_machines 4"},
		{"bidbrain", "tiers", local, 9, "reliable_machines 1 and twice max_machines 4"},
		// The elastic design holds no reliable machine.
		{"bidbrain", "elastic", local, 8, ""},
		{"bidbrain", "auto", bb, 7, ""},
		{"bidbrain", "elastic", bb, 6, ""},
		{"ondemand", "elastic", bb, 3, ""},
		{"bidbrain", "auto", jobsim.DefaultCalibration(), jobsim.DefaultCalibration().ReliableMachines + 2*128, "max_machines 128"},
		{"bidbrain", "elastic", jobsim.DefaultCalibration(), 2 * 128, "twice max_machines 128"},
		{"tiers", "auto", jobsim.DefaultCalibration(), jobsim.DefaultCalibration().Machines + jobsim.DefaultCalibration().ReliableMachines, "machines 32"},
	} {
		if n, _ := Bound(c.policy, c.design, c.cal); n != c.want {
			t.Errorf("%s (%s), max_machines %d: bound %d, want %d", c.policy, c.design, c.cal.MaxMachines, n, c.want)
		}
		err := CheckBound(c.policy, c.design, c.cal)
		switch {
		case c.fields == "" && err != nil:
			t.Errorf("%s, max_machines %d: %v", c.policy, c.cal.MaxMachines, err)
		case c.fields != "" && (!errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), c.fields)):
			t.Errorf("%s, max_machines %d: %v, want ErrTooMany naming %s", c.policy, c.cal.MaxMachines, err, c.fields)
		}
	}
	// One more transient machine than the host allows is refused.
	bb.MaxMachines = (MaxMachines-bb.ReliableMachines)/2 + 1
	if err := CheckBound("bidbrain", "auto", bb); !errors.Is(err, ErrTooMany) {
		t.Errorf("max_machines %d: %v, want ErrTooMany", bb.MaxMachines, err)
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
		ask: func(context.Context) (uint64, error) { asked++; return uint64(asked), nil }, now: func() time.Time { return now }, working: func() bool { return !down }}
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

// TestJobCheckpointCommitted: an elastic job dates a checkpoint by its
// commit, not its request, and asks for none while one is pending:
// BidBrain lets its last machines go only from a checkpoint written, and
// one dated by its request was released before the commit.
func TestJobCheckpointCommitted(t *testing.T) {
	start := time.Date(2015, 3, 2, 0, 0, 0, 0, time.UTC)
	now, asked, committed := start, 0, uint64(0)
	passes := 3
	j := &job{total: 4000, of: 10, ckptAt: start, passes: func() int { return passes },
		ask:       func(context.Context) (uint64, error) { asked++; return uint64(asked), nil },
		now:       func() time.Time { return now },
		committed: func() uint64 { return committed }}
	now = start.Add(25 * time.Minute)
	if err := j.Checkpoint(context.Background()); err != nil || asked != 1 {
		t.Fatalf("checkpoint: %v, %d requests", err, asked)
	}
	now, passes = start.Add(27*time.Minute), 4
	if err := j.Checkpoint(context.Background()); err != nil || asked != 1 {
		t.Errorf("asked again while one is pending: %v, %d requests", err, asked)
	}
	if st := j.Status(); !st.CheckpointAt.Equal(start) || st.Checkpointed != 0 {
		t.Errorf("before the commit: checkpoint at %v with %v done, want the start's", st.CheckpointAt, st.Checkpointed)
	}
	committed, now = 1, start.Add(28*time.Minute)
	if st := j.Status(); !st.CheckpointAt.Equal(now) || st.Checkpointed != 1200 {
		t.Errorf("after the commit: checkpoint at %v with %v done, want %v and 1200 (the work at the request)", st.CheckpointAt, st.Checkpointed, now)
	}
	if err := j.Checkpoint(context.Background()); err != nil || asked != 2 {
		t.Errorf("after the commit: %v, %d requests, want a second", err, asked)
	}
}
