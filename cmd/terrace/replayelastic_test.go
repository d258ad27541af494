package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/harness/realreplay"
)

// TestRealReplayElastic runs BidBrain's elastic design for real
// (local-lr-a9a-elastic.json: no reliable machine, chains of two) over
// the spike 90 minutes into the segment, 150 passes at 900x: the spike
// takes the machines it holds in 1a, the job drains or loses them, rolls
// back to its checkpoint and restarts when none is left, BidBrain buys
// again, the job trains to the end and reports its test accuracy and
// updates_lost, and nothing is left running (TERRACE_REAL_REPLAY=1;
// about 45 s).
func TestRealReplayElastic(t *testing.T) {
	if os.Getenv("TERRACE_REAL_REPLAY") == "" {
		t.Skip("set TERRACE_REAL_REPLAY=1")
	}
	r, out := replayForReal(t, terrace(t), "bidbrain", 90*time.Minute, "--speedup", "900", "--passes", "150", "--design", "elastic",
		"--calibration", repoFile("internal/harness/realreplay/testdata/local-lr-a9a-elastic.json"))
	t.Logf("%d acquisitions, %d evictions, %d restarts, updates_lost %s, %d checkpoint requests, at most %d machines at once, $%.2f, %.2f h",
		r.Acquisitions, r.Evictions, r.Restarts, fmtOpt(r.UpdatesLost), len(r.CheckpointRequests), r.PeakMachines, r.Dollars, r.Hours)
	for _, c := range []struct {
		bad  bool
		what string
	}{
		{r.Design != "elastic", fmt.Sprintf("design %q, want elastic", r.Design)},
		{r.Evictions < 1 || r.Acquisitions < 2, fmt.Sprintf("%d evictions, %d acquisitions: want the spike to evict machines and BidBrain to buy again", r.Evictions, r.Acquisitions)},
		{len(r.CheckpointRequests) < 1, "no checkpoint asked for: BidBrain's elastic job asks at Daly's interval"},
		{r.TestAccuracy == nil || *r.TestAccuracy < 0.8, fmt.Sprintf("test accuracy %s, want lr's on a9a", fmtOpt(r.TestAccuracy))},
		{r.UpdatesLost == nil, "updates_lost null: want the audit's count"},
		{r.PeakMachines < 1 || r.PeakMachines > realreplay.MaxMachines, fmt.Sprintf("at most %d machines ran at once, want 1 to %d", r.PeakMachines, realreplay.MaxMachines)},
		{r.Restarts > 0 && !strings.Contains(string(out), "restarted from"), fmt.Sprintf("%d restarts and none in the progress lines", r.Restarts)},
	} {
		if c.bad {
			t.Errorf("%s\n%s", c.what, out)
		}
	}
}
