package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/harness/drill"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// TestMain removes the command that terrace built, so that a run of the
// suite leaves nothing in the temporary directory.
// TestMain gives the test's processes a temporary directory of their own,
// removed at the end: the tests SIGKILL what they start, which leaves no
// time for a coordinator to remove its embedded etcd's temporary data
// (about 130 MB a coordinator, left in /tmp by every run before).
func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "terrace-cmdtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("TMPDIR", tmp)
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// terrace builds the command once per test binary.
func terrace(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "terrace-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "terrace")
		out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

func repoFile(rel string) string { return filepath.Join("..", "..", rel) }

// start runs the command with args and returns it and a reader of its
// combined output.
func start(t *testing.T, ctx context.Context, args ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.CommandContext(ctx, terrace(t), args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		pw.Close()
	})
	return cmd, bufio.NewReader(pr)
}

// TestSeparateProcesses trains lr with a coordinator, two servers and two
// workers, each its own OS process, talking over loopback TCP, as the
// README shows, and tries what issue 13 found: rank 0 drains mid-job and
// a replacement joins with no flags of its own (it takes the cluster's
// job); every pass is still evaluated, the coordinator's report holds
// every pass, and with --exit-when-done every process exits 0.
func TestSeparateProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs six processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	coordCmd, out := start(t, ctx, "coordinator", "--listen", "127.0.0.1:0", "--servers", "2", "--workers", "2",
		"--exit-when-done", "--report", filepath.Join(dir, "job.json"))
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(line)
	addr := f[slicesIndex(f, "on")+1]
	addr = strings.TrimSuffix(addr, ",")
	go io.Copy(io.Discard, out)
	var nodes []*exec.Cmd
	for i := range 2 {
		s, so := start(t, ctx, "server", "--coordinator", addr, "--id", fmt.Sprintf("s%d", i), "--log-level", "warn")
		go io.Copy(io.Discard, so)
		nodes = append(nodes, s)
	}
	rank0 := make(chan *exec.Cmd, 3)
	startWorker := func(id string, args ...string) *exec.Cmd {
		w, wo := start(t, ctx, append([]string{"worker", "--coordinator", addr, "--id", id}, args...)...)
		go func() {
			for {
				l, err := wo.ReadString('\n')
				if err != nil {
					return
				}
				if strings.Contains(l, "rank 0,") {
					rank0 <- w
				}
			}
		}()
		return w
	}
	for i := range 2 {
		nodes = append(nodes, startWorker(fmt.Sprintf("w%d", i), "--train", repoFile("datasets/a9a/a9a.gz"),
			"--test", repoFile("datasets/a9a/a9a.t.gz"), "--epochs", "8", "--lr", a9aAlpha))
	}
	// Drain rank 0 as soon as it trains; a flagless worker replaces it.
	(<-rank0).Process.Signal(syscall.SIGTERM)
	nodes = append(nodes, startWorker("w2"))
	for i, n := range append(nodes, coordCmd) {
		if err := n.Wait(); err != nil {
			t.Errorf("process %d (%v): %v", i, n.Args[1:3], err)
		}
	}
	var rep struct {
		Job    struct{ Passes int } `json:"job"`
		Passes []struct{ Pass int } `json:"passes"`
		Final  map[string]float64   `json:"final"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "job.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Job.Passes != 8 || len(rep.Passes) != 8 {
		t.Errorf("coordinator's report: job of %d passes with %d evaluated, want 8 of 8:\n%s", rep.Job.Passes, len(rep.Passes), b)
	}
	if rep.Final["test_accuracy"] < 0.845 || rep.Final["test_auc"] < 0.90 {
		t.Errorf("final %v: want test accuracy >= 0.845 and AUC >= 0.90", rep.Final)
	}
}

func slicesIndex(f []string, s string) int {
	for i, x := range f {
		if x == s {
			return i
		}
	}
	return -1
}

// TestTrainReport checks the command-line contract of `terrace train`.
func TestTrainReport(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	out, err := exec.Command(terrace(t), "train", "--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"),
		"--epochs", "3", "--consistency", "bsp", "--report", report).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("pass  3/3")) {
		t.Errorf("no progress lines in\n%s", out)
	}
	var rep map[string]any
	b, _ := os.ReadFile(report)
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, b)
	}
	for _, k := range []string{"app", "config", "seconds", "examples_per_second", "test_accuracy", "test_logloss", "test_auc"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	if rep["app"] != "lr" {
		t.Errorf("app %v", rep["app"])
	}
	// The job as trained, with typed values and the data paths used; the
	// config holds the other flags that apply, typed, in snake_case.
	job, _ := rep["job"].(map[string]any)
	if job["consistency"] != "bsp" || job["passes"] != 3.0 || job["train"] != repoFile("datasets/a9a/a9a.gz") {
		t.Errorf("job %v", job)
	}
	// No --batch: the batch lr chose for the data (32,561 rows / 400), not 0.
	if job["batch"] != 81.0 {
		t.Errorf("job's batch %v, want lr's choice for a9a, 81", job["batch"])
	}
	cfg, _ := rep["config"].(map[string]any)
	if cfg["servers"] != 2.0 || cfg["log_level"] != "warn" || cfg["kill"] != nil || cfg["topics"] != nil {
		t.Errorf("config %v", cfg)
	}
}

// TestTrainStoppedBySIGTERM: a train stopped mid-run exits 1 saying a
// signal stopped it before the end (it said only "context canceled", or
// that a wait had timed out).
func TestTrainStoppedBySIGTERM(t *testing.T) {
	cmd := exec.Command(terrace(t), "train", "--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"),
		"--epochs", "1000")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r := bufio.NewReader(io.TeeReader(pr, &out))
	if _, err := r.ReadString('\n'); err != nil { // the first pass's line: training
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	go io.Copy(io.Discard, r)
	err := cmd.Wait()
	pw.Close()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit %v, want 1:\n%s", err, out.String())
	}
	if want := "stopped before the end (terminated signal received)"; !strings.Contains(out.String(), want) {
		t.Errorf("no %q in:\n%s", want, out.String())
	}
	if strings.Contains(out.String(), "timed out") {
		t.Errorf("a stop reported as a timeout:\n%s", out.String())
	}
}

func TestMalformedDataNamesFileAndLine(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.svm")
	os.WriteFile(bad, []byte("+1 1:1 2:1\n\n-1 3:1 x:2\n"), 0o644)
	out, err := exec.Command(terrace(t), "train", "--train", bad, "--test", bad, "--epochs", "1").CombinedOutput()
	if err == nil {
		t.Fatalf("training on a malformed file succeeded:\n%s", out)
	}
	if !bytes.Contains(out, []byte("bad.svm:3:")) {
		t.Errorf("error does not name file and line:\n%s", out)
	}
}

func TestUnreachableCoordinatorFailsInBoundedTime(t *testing.T) {
	start := time.Now()
	out, err := exec.Command(terrace(t), "worker", "--coordinator", "127.0.0.1:1", "--join-timeout", "1s",
		"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz")).CombinedOutput()
	if err == nil {
		t.Fatalf("worker without coordinator succeeded:\n%s", out)
	}
	if !bytes.Contains(out, []byte("unreachable")) {
		t.Errorf("unclear error:\n%s", out)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v to give up", d)
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("epochs: 1\nservers: 1\nworkers: 1\nnonsense: 3\n"), 0o644)
	out, err := exec.Command(terrace(t), "train", "--config", cfg).CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte(`unknown setting "nonsense"`)) {
		t.Fatalf("unknown config key: %v\n%s", err, out)
	}
}

// drillReport is what the drill tests read of a `train --processes` report.
type drillReport struct {
	TestAccuracy *float64 `json:"test_accuracy"`
	TestAUC      *float64 `json:"test_auc"`
	RunDir       string   `json:"run_dir"`
	Faults       []struct {
		TimeS  float64 `json:"time_s"`
		Action string  `json:"action"`
		Role   string  `json:"role"`
		Node   string  `json:"node"`
		PID    int     `json:"pid"`
		Note   string  `json:"note"`
	} `json:"faults"`
	Nodes []struct {
		Name     string `json:"name"`
		Role     string `json:"role"`
		Finished bool   `json:"finished"`
	} `json:"nodes"`
	TrainingSeconds         float64  `json:"training_seconds"`
	MaxStallSeconds         *float64 `json:"max_stall_seconds"`
	MaxStallAtSeconds       *float64 `json:"max_stall_at_seconds"`
	AckedUpdatesLost        *int64   `json:"acked_updates_lost"`
	AckedUpdatesDuplicated  *int64   `json:"acked_updates_duplicated"`
	AckedExampleUpdatesLost *int64   `json:"acked_example_updates_lost"`
	ExamplesRepeated        *int64   `json:"examples_repeated"`
	ExamplesSkipped         *int64   `json:"examples_skipped"`
	ExamplesAudited         *int64   `json:"examples_audited"`
	// The coordinator's examples account, without the audit.
	Account *drill.ExamplesAccount `json:"examples_account"`
	Notes   []string               `json:"notes"`
	// With --reliable/--transient (tiers_test.go).
	*drill.TierReport
}

// runDrill runs `terrace train --processes` with args on the a9a data and
// returns its report; it fails the test if the command fails.
func runDrill(t *testing.T, args ...string) *drillReport {
	t.Helper()
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	args = append([]string{"train", "--processes", "--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"),
		"--run-dir", filepath.Join(dir, "run"), "--report", report, "--timeout", "2m"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, terrace(t), args...).CombinedOutput()
	var rep drillReport
	b, rerr := os.ReadFile(report)
	if rerr == nil {
		rerr = json.Unmarshal(b, &rep)
	}
	if err != nil || rerr != nil {
		t.Fatalf("terrace %s: %v (report: %v)\n%s", strings.Join(args, " "), err, rerr, out)
	}
	t.Logf("terrace %s\n%s", strings.Join(args, " "), out)
	return &rep
}

// finishedWorkers counts the workers that trained to the end.
func finishedWorkers(rep *drillReport) int {
	n := 0
	for _, node := range rep.Nodes {
		if node.Role == "worker" && node.Finished {
			n++
		}
	}
	return n
}

func hasFault(rep *drillReport, action, role string) bool {
	for _, f := range rep.Faults {
		if f.Action == action && f.Role == role && f.Node != "" && f.PID > 0 {
			return true
		}
	}
	return false
}

// a9aAlpha is FTRL's alpha for the tests that check a9a's targets (test
// accuracy >= 0.845): the default, 1, leaves a9a's last-pass accuracy half
// a point noisy (apps/lr's TestA9A says more).
const a9aAlpha = "0.5"

// drillKillAt is when the drill tests kill a node, after training starts:
// early enough that the five epochs (about a second on one core) are not
// over, or the fault is never injected (the tests check that it was).
const drillKillAt = "400ms"

// TestDrillServerKill kills one of three servers (k = 2) during training,
// every node its own process: training must finish, with no acknowledged
// update lost and the usual model quality.
func TestDrillServerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of six processes")
	}
	rep := runDrill(t, "--servers", "3", "--workers", "2", "--replication", "2", "--epochs", "5", "--lr", a9aAlpha, "--kill", "server@"+drillKillAt)
	if !hasFault(rep, "kill", "server") {
		t.Fatalf("faults %+v: no server kill (training took %.2fs)", rep.Faults, rep.TrainingSeconds)
	}
	if rep.AckedUpdatesLost == nil || *rep.AckedUpdatesLost != 0 {
		t.Errorf("acked_updates_lost %v, want 0 (notes %q)", ptr(rep.AckedUpdatesLost), rep.Notes)
	}
	// Both workers finish, so every increment of the trained table was
	// acknowledged too: a row trained fewer times than epochs is an
	// acknowledged update lost.
	if rep.AckedExampleUpdatesLost == nil || *rep.AckedExampleUpdatesLost != 0 {
		t.Errorf("acked_example_updates_lost %v, want 0 (notes %q)", ptr(rep.AckedExampleUpdatesLost), rep.Notes)
	}
	if rep.AckedUpdatesDuplicated == nil || *rep.AckedUpdatesDuplicated != 0 || rep.ExamplesRepeated == nil || *rep.ExamplesRepeated != 0 {
		t.Errorf("updates applied twice %v, examples repeated %v; want 0 and 0", ptr(rep.AckedUpdatesDuplicated), ptr(rep.ExamplesRepeated))
	}
	if rep.TestAUC == nil || *rep.TestAUC < 0.90 || *rep.TestAccuracy < 0.845 {
		t.Errorf("test accuracy %v AUC %v, want >= 0.845 and >= 0.90", ptr(rep.TestAccuracy), ptr(rep.TestAUC))
	}
	if rep.MaxStallSeconds == nil {
		t.Fatal("no max_stall_seconds")
	}
	t.Logf("server kill at %.2fs: max_stall_seconds %.3f (at %.2fs), training %.2fs, examples repeated %v, skipped %v",
		rep.Faults[0].TimeS, *rep.MaxStallSeconds, *rep.MaxStallAtSeconds, rep.TrainingSeconds, ptr(rep.ExamplesRepeated), ptr(rep.ExamplesSkipped))
}

// TestDrillWorkerKill kills one of two workers: the other must still
// train to the end, taking over the dead worker's leased partitions from
// their last recorded offsets, so that no example is skipped and at most
// the minibatches since the last progress report are repeated.
func TestDrillWorkerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of five processes")
	}
	rep := runDrill(t, "--servers", "2", "--workers", "2", "--replication", "2", "--epochs", "5", "--account", "--kill", "worker@"+drillKillAt)
	if !hasFault(rep, "kill", "worker") {
		t.Fatalf("faults %+v: no worker kill (training took %.2fs)", rep.Faults, rep.TrainingSeconds)
	}
	if finished := finishedWorkers(rep); finished != 1 {
		t.Errorf("%d workers finished, want the one that was not killed", finished)
	}
	if rep.ExamplesSkipped == nil || *rep.ExamplesSkipped != 0 {
		t.Errorf("examples_skipped %v: the killed worker's partitions were not taken over", ptr(rep.ExamplesSkipped))
	}
	// A successor repeats only what the killed worker trained of the
	// partition it held since its last recorded progress: at most that
	// partition (a9a's 32,561 rows in 8 partitions). lr tries to record
	// progress every 8 minibatches of 100 (300-900 repeated is typical),
	// but a record still on its way to the coordinator holds the next
	// back: on a loaded machine a record can take dozens of minibatches
	// (2,800 repeated, seen once in CI), so the tighter figure is timing.
	if rep.ExamplesRepeated == nil || *rep.ExamplesRepeated > (32561+7)/8 {
		t.Errorf("examples_repeated %v, want at most the %d rows of the partition the killed worker held", ptr(rep.ExamplesRepeated), (32561+7)/8)
	}
	if rep.AckedUpdatesLost == nil || *rep.AckedUpdatesLost != 0 {
		t.Errorf("acked_updates_lost %v, want 0", ptr(rep.AckedUpdatesLost))
	}
	if rep.AckedExampleUpdatesLost != nil {
		t.Errorf("acked_example_updates_lost %v: cannot be told from skipped partitions when a worker stopped, want null", *rep.AckedExampleUpdatesLost)
	}
	if rep.TestAUC == nil {
		t.Error("no test metrics")
	}
	// The coordinator's account (a count per partition, always kept) finds
	// what the audit (a count per row) finds, but for the minibatches in
	// flight when the worker died: the two counts are separate pushes, and
	// one may be applied without the other. lr keeps at most 8
	// minibatches of 100 rows in flight (apps/lr: window, AutoBatch).
	if a := rep.Account; a == nil || a.Passes != 5 || a.Skipped != 0 || rep.ExamplesRepeated == nil || abs(a.Repeated-*rep.ExamplesRepeated) > 8*100 {
		t.Errorf("examples account %+v, audit's examples_repeated %v: want 5 passes, none skipped, and the audit's repeats give or take one window", a, ptr(rep.ExamplesRepeated))
	}
	t.Logf("worker kill at %.2fs: examples_skipped %d, examples_repeated %d, max_stall_seconds %.3f, test AUC %.4f", rep.Faults[0].TimeS, *rep.ExamplesSkipped, *rep.ExamplesRepeated, *rep.MaxStallSeconds, *rep.TestAUC)
}

func abs(x int64) int64 { return max(x, -x) }

func ptr[T any](p *T) any {
	if p == nil {
		return "null"
	}
	return *p
}

// TestDrillCoordinatorKill runs three coordinators that form their own
// etcd cluster and kills one (leader or not, as the seed picks) and then a
// server: training must finish with nothing acknowledged lost.
func TestDrillCoordinatorKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of eight processes")
	}
	for _, seed := range []string{"1", "2"} {
		rep := runDrill(t, "--coordinators", "3", "--servers", "3", "--workers", "2", "--replication", "2", "--epochs", "15",
			"--seed", seed, "--kill", "coordinator@400ms,server@1s")
		if !hasFault(rep, "kill", "coordinator") {
			t.Fatalf("seed %s: faults %+v: no coordinator kill", seed, rep.Faults)
		}
		if rep.AckedUpdatesLost == nil || *rep.AckedUpdatesLost != 0 {
			t.Errorf("seed %s: acked_updates_lost %v, want 0", seed, ptr(rep.AckedUpdatesLost))
		}
		if rep.ExamplesSkipped == nil || *rep.ExamplesSkipped != 0 {
			t.Errorf("seed %s: examples_skipped %v, want 0", seed, ptr(rep.ExamplesSkipped))
		}
		t.Logf("seed %s: coordinator and server killed; max_stall_seconds %.3f, test AUC %v", seed, *rep.MaxStallSeconds, ptr(rep.TestAUC))
	}
}

// TestDrillFlags checks the command line of the drill without starting a
// cluster.
func TestDrillFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kill", "server@1s"}, "--kill and --evict need --processes"},
		{[]string{"--evict", "worker@1s"}, "--kill and --evict need --processes"},
		{[]string{"--coordinators", "0"}, "need at least one"},
		{[]string{"--processes", "--kill", "server@1s,srv@2s"}, `--kill item 2 "srv@2s": unknown role "srv"`},
		{[]string{"--processes", "--evict", "worker@3"}, `--evict item 1 "worker@3"`},
		// With no majority of coordinators left none leads: the run only
		// failed at its end, "no worker finished".
		{[]string{"--processes", "--kill", "coordinator@2s"}, "no majority of them would be left to lead (give --coordinators 3 or more)"},
		{[]string{"--processes", "--coordinators", "3", "--kill", "coordinator@2s", "--evict", "coordinator@3s"}, "--coordinators 3: no majority"},
	} {
		out, err := exec.Command(terrace(t), append([]string{"train"}, tc.args...)...).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte(tc.want)) {
			t.Errorf("train %q: %v, want an error containing %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestTrainAudit runs the audit in one process for each app: the audit
// is the partition loop's, not an app's, and nothing fails, so nothing is
// lost, repeated or skipped.
func TestTrainAudit(t *testing.T) {
	apps := map[string][]string{
		"lr":  {"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz")},
		"lda": {"--train", repoFile("datasets/kos/doc_word_count.tsv.gz"), "--topics", "5"},
	}
	if train, ok := data.SharedPath("ratings/ml-100k/u1.base"); ok {
		test, _ := data.SharedPath("ratings/ml-100k/u1.test")
		apps["mf"] = []string{"--train", train, "--test", test}
	}
	for app, args := range apps {
		t.Run(app, func(t *testing.T) {
			report := filepath.Join(t.TempDir(), "r.json")
			args := append([]string{"train", "--audit", "--app", app, "--passes", "2", "--report", report}, args...)
			out, err := exec.Command(terrace(t), args...).CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var rep drillReport
			b, _ := os.ReadFile(report)
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatalf("report: %v\n%s", err, b)
			}
			for name, v := range map[string]*int64{"acked_updates_lost": rep.AckedUpdatesLost, "acked_example_updates_lost": rep.AckedExampleUpdatesLost,
				"examples_repeated": rep.ExamplesRepeated, "examples_skipped": rep.ExamplesSkipped, "acked_updates_duplicated": rep.AckedUpdatesDuplicated} {
				if v == nil || *v != 0 {
					t.Errorf("%s %v, want 0", name, ptr(v))
				}
			}
			if rep.ExamplesAudited == nil || *rep.ExamplesAudited == 0 {
				t.Errorf("examples_audited %v: nothing audited", ptr(rep.ExamplesAudited))
			}
			if rep.MaxStallSeconds == nil || len(rep.Faults) != 0 {
				t.Errorf("max_stall_seconds %v, faults %v", ptr(rep.MaxStallSeconds), rep.Faults)
			}
		})
	}
}

// TestFlagTypesInHelp: no flag's usage holds a backquoted phrase, which
// pflag shows in --help as the flag's type ("--tls-dir terrace certs
// issue" in place of "--tls-dir string").
func TestFlagTypesInHelp(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); strings.Contains(name, " ") {
				t.Errorf("terrace %s --%s shows its type as %q", c.Name(), f.Name, name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, c := range []*cobra.Command{trainCmd(), coordinatorCmd(), serverCmd(), workerCmd(), benchCmd(), planCmd(), replayCmd(),
		submitCmd(), statusCmd(), eventsCmd(), plotCmd(), exportCmd(), predictCmd(), certsCmd(), tokensCmd(), checkpointCmd()} {
		walk(c)
	}
}

// TestStoppedSaysNoReport: a command stopped by a signal said only
// "stopped before the end"; whether its --report had been written, in
// part or at all, was left to guess. It says none was written in this run.
func TestStoppedSaysNoReport(t *testing.T) {
	dir := t.TempDir()
	old, fresh := filepath.Join(dir, "old.json"), filepath.Join(dir, "fresh.json")
	os.WriteFile(old, []byte("{}"), 0o644)
	start := time.Now()
	os.Chtimes(old, start.Add(-time.Hour), start.Add(-time.Hour))
	os.WriteFile(fresh, []byte("{}"), 0o644)
	os.Chtimes(fresh, start.Add(time.Second), start.Add(time.Second))
	for _, tc := range []struct{ report, want string }{
		{"", ""},
		{filepath.Join(dir, "none.json"), "; no report written to " + filepath.Join(dir, "none.json")},
		{old, "; no report written: " + old + " is an earlier run's"},
		{fresh, ""},
	} {
		c := replayCmd()
		if tc.report != "" {
			c.Flags().Set("report", tc.report)
		}
		if got := unwritten(c, start); got != tc.want {
			t.Errorf("--report %q: %q, want %q", tc.report, got, tc.want)
		}
	}
	if got := unwritten(statusCmd(), start); got != "" {
		t.Errorf("a command without --report: %q", got)
	}
}
