package realreplay

import (
	"errors"
	"strings"
	"testing"
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
