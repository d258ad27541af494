package drill

import (
	"context"
	"path/filepath"
	"testing"
)

// TestRolledBack: a restart loses what the stopped job's workers had
// acknowledged (with what the job resumed with) beyond the checkpoint's
// count, and nothing when the checkpoint holds all of it.
func TestRolledBack(t *testing.T) {
	saved := Saved{Seq: 3, Pass: 5, ByRank: map[int]int64{0: 1206, 1: 1206}}
	for _, c := range []struct {
		name        string
		base, acked map[int]int64
		want        int64
	}{
		{"work after the checkpoint", nil, map[int]int64{0: 1300, 1: 1250}, 138},
		{"killed at the checkpoint", nil, map[int]int64{0: 1206, 1: 1206}, 0},
		{"resumed, then work after the next checkpoint", map[int]int64{0: 804, 1: 804}, map[int]int64{0: 450, 1: 410}, 56},
		{"logs short of the checkpoint (a record lost at the kill)", nil, map[int]int64{0: 1205, 1: 1206}, 0},
	} {
		if got := RolledBack(c.base, c.acked, saved); got != c.want {
			t.Errorf("%s: %d rolled back, want %d", c.name, got, c.want)
		}
	}
	none := Saved{Pass: -1}
	if got := RolledBack(nil, map[int]int64{0: 300}, none); got != 300 {
		t.Errorf("no checkpoint: %d rolled back, want all 300", got)
	}
}

// TestCheckpointAuditNone: a directory with no committed checkpoint saved
// nothing.
func TestCheckpointAuditNone(t *testing.T) {
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "absent")} {
		s, err := CheckpointAudit(context.Background(), dir)
		if err != nil || s.Pass != -1 || s.Total() != 0 {
			t.Errorf("%s: %+v, %v; want pass -1 and nothing saved", dir, s, err)
		}
	}
}

// TestAuditRankInvertsAuditKey: a checkpoint's audit keys are counted
// for the rank that pushed them.
func TestAuditRankInvertsAuditKey(t *testing.T) {
	for r := range 5 {
		for i := range AuditSpread + 3 {
			if got := auditRank(AuditKey(r, i)); got != r {
				t.Fatalf("auditRank(AuditKey(%d, %d)) = %d", r, i, got)
			}
		}
	}
}
