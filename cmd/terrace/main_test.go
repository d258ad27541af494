package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

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
// workers, each its own OS process, talking over loopback TCP.
func TestSeparateProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs five processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	_, out := start(t, ctx, "coordinator", "--listen", "127.0.0.1:0", "--servers", "2", "--workers", "2", "--report", filepath.Join(dir, "reports.json"))
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(line)
	addr := f[slicesIndex(f, "on")+1]
	addr = strings.TrimSuffix(addr, ",")
	go io.Copy(io.Discard, out)
	for i := range 2 {
		_, so := start(t, ctx, "server", "--coordinator", addr, "--id", fmt.Sprintf("s%d", i), "--log-level", "warn")
		go io.Copy(io.Discard, so)
	}
	var workers []*exec.Cmd
	var outs []*bytes.Buffer
	for i := range 2 {
		var b bytes.Buffer
		cmd := exec.CommandContext(ctx, terrace(t), "worker", "--coordinator", addr, "--id", fmt.Sprintf("w%d", i),
			"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"), "--epochs", "5",
			"--report", filepath.Join(dir, fmt.Sprintf("w%d.json", i)))
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		workers = append(workers, cmd)
		outs = append(outs, &b)
	}
	for i, w := range workers {
		if err := w.Wait(); err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, outs[i])
		}
	}
	var best float64
	for i := range 2 {
		var rep struct {
			Rank         int     `json:"rank"`
			Examples     int64   `json:"examples"`
			TestAccuracy float64 `json:"test_accuracy"`
			TestAUC      float64 `json:"test_auc"`
		}
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("w%d.json", i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Examples == 0 {
			t.Errorf("worker %d trained nothing: %s", i, b)
		}
		if rep.Rank == 0 {
			best = rep.TestAUC
			if rep.TestAccuracy < 0.845 || rep.TestAUC < 0.90 {
				t.Errorf("rank 0: test accuracy %.4f AUC %.4f, want >= 0.845 and >= 0.90", rep.TestAccuracy, rep.TestAUC)
			}
		}
	}
	if best == 0 {
		t.Fatal("no report from rank 0")
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
	if !bytes.Contains(out, []byte("epoch  3/3")) {
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
	cfg, _ := rep["config"].(map[string]any)
	if cfg["consistency"] != "bsp" || cfg["epochs"] != "3" {
		t.Errorf("config %v", cfg)
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
