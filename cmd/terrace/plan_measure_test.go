package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/harness/drill"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/planner"
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
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
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
	if left, _ := filepath.Glob(filepath.Join(tmp, "terrace-cluster-*")); len(left) > 0 {
		t.Errorf("the stages' run directories are left in TMPDIR: %v", left)
	}
	if len(rep.Calibration.RunDirs) != 0 {
		// Stages that measured leave nothing behind without --measure-keep-runs.
		t.Errorf("run directories kept: %v", rep.Calibration.RunDirs)
		for _, dir := range rep.Calibration.RunDirs {
			if strings.HasPrefix(filepath.Base(dir), "terrace-cluster-") {
				t.Cleanup(func() { os.RemoveAll(dir) })
			}
		}
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

// TestStageSample turns two fixed probes and audit logs into a sample:
// updates counted by class inside the window only, processor time by
// role, and each server's counters over the window of its own lines.
func TestStageSample(t *testing.T) {
	t0 := time.Unix(100, 0)
	t1 := t0.Add(4 * time.Second)
	stats := func(role string, bytesIn, stream, pushes, store float64) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"role": role, "bytes_in": bytesIn, "stream_bytes": stream, "pushes": pushes, "store_bytes": store})
		return b
	}
	node := func(name string, role, class drill.Role, worker int, cpu float64) drill.NodeSample {
		return drill.NodeSample{Name: name, Role: role, Class: class, Worker: worker, CPUSeconds: cpu}
	}
	p0 := probe{at: t0, hostBusy: 50, hostProcs: 2, nodes: []drill.NodeSample{
		node("coordinator", drill.Coordinator, "", -1, 1),
		node("worker-r", drill.Worker, drill.Reliable, 0, 2),
		node("worker-t", drill.Worker, drill.Transient, 1, 3),
	}}
	p1 := probe{at: t1, hostBusy: 56, hostProcs: 2, nodes: []drill.NodeSample{
		node("coordinator", drill.Coordinator, "", -1, 1.5),
		node("worker-r", drill.Worker, drill.Reliable, 0, 2.5),
		node("worker-t", drill.Worker, drill.Transient, 1, 4),
	}}
	// Servers' lines came 1 s after the first probe and 1 s before the
	// second: their counters are over those 2 s.
	s0 := node("server-r", drill.Server, drill.Reliable, -1, 10)
	s0.Stats, s0.StatsAt = stats("backupps", 1000, 0, 0, 0), t0.Add(time.Second)
	s1 := node("server-r", drill.Server, drill.Reliable, -1, 10.5)
	s1.Stats, s1.StatsAt = stats("backupps", 5000, 0, 0, 900), t1.Add(-time.Second)
	a0 := node("server-t", drill.Server, drill.Transient, -1, 20)
	a0.Stats, a0.StatsAt = stats("activeps", 0, 100, 10, 0), t0.Add(time.Second)
	a1 := node("server-t", drill.Server, drill.Transient, -1, 22)
	a1.Stats, a1.StatsAt = stats("activeps", 8000, 4100, 50, 1000), t1.Add(-time.Second)
	p0.nodes = append(p0.nodes, s0, a0)
	p1.nodes = append(p1.nodes, s1, a1)
	at := func(secs ...float64) []int64 {
		var ts []int64
		for _, s := range secs {
			ts = append(ts, t0.Add(time.Duration(s*float64(time.Second))).UnixNano())
		}
		return ts
	}
	logs := map[int]*drill.WorkerLog{
		0: {Rank: 0, Times: at(-1, 0.5, 1, 2, 5)},     // 3 in the window
		1: {Rank: 1, Times: at(0.1, 1, 2, 3, 3.9, 4)}, // 6
	}
	f := planFlags{reliable: 1, transient: 1, replication: 2}
	s, notes, err := stageSample(f, tier.Stage2, p0, p1, logs)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) > 0 {
		t.Errorf("notes: %v", notes)
	}
	want := planner.StageSample{
		Stage: tier.Stage2, Seconds: 4,
		Updates:          tier.ByClass{Reliable: 3, Transient: 6},
		WorkerCPUSeconds: tier.ByClass{Reliable: 0.5, Transient: 1},
		HeadCPUSeconds:   2, NodeCPUSeconds: 0.5 + 0.5 + 1 + 0.5 + 2, HostBusySeconds: 6, HostProcessors: 2,
		BytesIn: (4000 + 8000) / 2.0, StreamBytes: 4000 / 2.0, Pushes: 40 / 2.0,
		ChainLength: 1, BackupCopies: 1, ModelStateBytes: 900,
	}
	if s != want {
		t.Errorf("sample\n got %+v\nwant %+v", s, want)
	}
}

// TestTrainPlanFlag: train's --plan (the calibration --stage auto plans
// from) fails at once, naming the flag, when misused.
func TestTrainPlanFlag(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.json")
	if err := os.WriteFile(empty, []byte(`{"stage": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A plan made without --measure: its measurements are the planner's
	// defaults, which --stage auto took as a calibration.
	unmeasured := filepath.Join(t.TempDir(), "unmeasured.json")
	if out, err := exec.Command(terrace(t), "plan", "--reliable", "1", "--transient", "1", "--report", unmeasured).CombinedOutput(); err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1", "--stage", "auto", "--plan", unmeasured}, "made without --measure"},
		{[]string{"train", "--plan", "x"}, "--plan needs --reliable and --transient"},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1", "--stage", "2", "--plan", "x"}, "--plan needs --stage auto"},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1", "--stage", "auto", "--plan", filepath.Join(t.TempDir(), "none.json")}, "--plan: open"},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1", "--stage", "auto", "--plan", empty}, "no measurements"},
	} {
		out, err := exec.Command(terrace(t), tc.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q: %v, want an error containing %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}
