package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanMeasure runs `terrace plan --measure` for real: a calibration
// job of separate processes in each stage, with emulated links, briefly
// (TERRACE_PLAN_MEASURE=1; three stages of about 8 s each). It checks the
// contract, not the figures: the command says it calibrated and for how
// long, and the report holds every stage's measurements and a plan made
// from them.
func TestPlanMeasure(t *testing.T) {
	if os.Getenv("TERRACE_PLAN_MEASURE") == "" {
		t.Skip("set TERRACE_PLAN_MEASURE=1 to run plan --measure's calibration job (about 30 s)")
	}
	path := filepath.Join(t.TempDir(), "plan.json")
	cmd := exec.Command(terrace(t), "plan", "--measure", "--reliable", "1", "--transient", "2",
		"--link-mbps", "reliable=20,transient=200", "--measure-warmup", "1s", "--measure-window", "2s", "--report", path)
	cmd.Dir = repoFile(".") // the default data, datasets/a9a
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("plan --measure: %v\n%s", err, out)
	}
	for _, want := range []string{"terrace plan: calibrating", "stage 1: training after", "stage 3: ", "calibrated in", "measured by a"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep planReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Measured || rep.Calibration == nil || rep.Calibration.Seconds <= 0 {
		t.Fatalf("report: measured %v, calibration %+v", rep.Measured, rep.Calibration)
	}
	if n := len(rep.Calibration.Samples); n != 3 {
		t.Fatalf("%d stages measured, want 3", n)
	}
	for _, s := range rep.Calibration.Samples {
		if s.Updates.Reliable+s.Updates.Transient <= 0 || s.NodeCPUSeconds <= 0 || s.BytesIn <= 0 {
			t.Errorf("stage %d: nothing measured: %+v", s.Stage, s)
		}
		if s.Stage > 1 && s.StreamBytes <= 0 {
			t.Errorf("stage %d: no stream measured", s.Stage)
		}
	}
	if len(rep.Candidates) != 3 || rep.Measurements.Stages == nil || rep.Measurements.HostCores <= 0 {
		t.Errorf("plan: %d candidates, measurements %+v", len(rep.Candidates), rep.Measurements)
	}
	for _, c := range rep.Candidates {
		if c.UpdatesPerSecond <= 0 || len(c.Bottleneck) == 0 {
			t.Errorf("stage %d: %v updates/s, bottleneck %v", c.Stage, c.UpdatesPerSecond, c.Bottleneck)
		}
	}
}
