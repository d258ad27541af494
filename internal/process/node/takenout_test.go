package node

import (
	"testing"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// TestTakenOutSaysOnlyFailures: a server the layouts stop naming without
// a drain was taken out as failed while it ran (SIGSTOPped longer than the
// failure timeout, and continued: it went on silently, owning nothing,
// while status showed it dead), and says so; one that drained (its own
// notice, or a leave asked of the coordinator, which makes it Leaving
// first) or that stays in any role says nothing.
func TestTakenOutSaysOnlyFailures(t *testing.T) {
	srv := func(ids ...string) []ring.Server {
		var out []ring.Server
		for _, id := range ids {
			out = append(out, ring.Server{ID: id})
		}
		return out
	}
	ringOf := func(ids ...string) *layout.Layout { return &layout.Layout{Servers: srv(ids...)} }
	leavingS1 := ringOf("s0", "s1")
	leavingS1.Leaving = []string{"s1"}
	standbyS1 := ringOf("s0")
	standbyS1.Standby = srv("s1")
	backupS1 := ringOf("s0")
	backupS1.Backup = srv("s1")
	joiningS1 := ringOf("s0")
	joiningS1.Joining = srv("s1")
	for _, c := range []struct {
		name       string
		prev, next *layout.Layout
		notice     bool
		want       bool
	}{
		{"off the ring while running", ringOf("s0", "s1"), ringOf("s0", "s2"), false, true},
		{"a joiner taken out", joiningS1, ringOf("s0"), false, true},
		{"a BackupPS taken out", backupS1, ringOf("s0"), false, true},
		{"its own notice", ringOf("s0", "s1"), ringOf("s0"), true, false},
		{"a leave asked of the coordinator", leavingS1, ringOf("s0"), false, false},
		{"still on the ring", ringOf("s0", "s1"), ringOf("s1", "s2"), false, false},
		{"put on standby", ringOf("s0", "s1"), standbyS1, false, false},
		{"never in the cluster", ringOf("s0"), ringOf("s0", "s2"), false, false},
	} {
		if got := takenOut(inCluster(c.prev, "s1"), c.next, "s1", c.notice); got != c.want {
			t.Errorf("%s: taken out %v, want %v", c.name, got, c.want)
		}
	}
}
