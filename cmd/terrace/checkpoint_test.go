package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckpointResume trains four epochs with a checkpoint every two,
// resumes from the checkpoint directory with nothing left to train, and
// checks that the resumed model scores exactly as the first run's did; then
// tears the newest commit record and checks that the resume falls back to
// the previous checkpoint.
func TestCheckpointResume(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	data := []string{"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz")}
	run := func(report string, args ...string) map[string]any {
		t.Helper()
		rep, _ := runTrain(t, report, append(data, args...)...)
		return rep
	}
	first := run(filepath.Join(dir, "a.json"), "--epochs", "4", "--checkpoint-dir", ck, "--checkpoint-every", "2")
	resumed := run(filepath.Join(dir, "b.json"), "--epochs", "4", "--resume", ck)
	for _, k := range []string{"test_accuracy", "test_logloss", "test_auc"} {
		if first[k] != resumed[k] {
			t.Errorf("%s: %v after training, %v after resuming with nothing to train", k, first[k], resumed[k])
		}
	}
	if resumed["examples"].(float64) != 0 {
		t.Errorf("resume trained %v examples of finished epochs", resumed["examples"])
	}
	// Tear the newest commit record: the resume must use checkpoint 1
	// (after epoch 2) and train the last two epochs again.
	p := filepath.Join(ck, "commit-0000000002")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, b[:len(b)/2], 0o644)
	again := run(filepath.Join(dir, "c.json"), "--epochs", "4", "--resume", ck)
	if n := again["examples"].(float64); n != 2*32561 {
		t.Errorf("after tearing the newest commit, the resume trained %v examples, want the 2 epochs after checkpoint 1 (%d)", n, 2*32561)
	}
	if auc := again["test_auc"].(float64); auc < 0.89 {
		t.Errorf("test AUC %v after resuming from checkpoint 1", auc)
	}
}

// TestCheckpointKeep: a checkpoint every pass for five passes, two kept:
// the commit records and every server's parts of the first three are gone
// when train returns, and the kept newest still resumes; then a damaged
// server part of the newest makes the resume fall back to the one before.
func TestCheckpointKeep(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	data := []string{"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz")}
	train := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(terrace(t), append(append([]string{"train"}, data...), args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("train %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	train("--passes", "5", "--checkpoint-dir", ck, "--checkpoint-every", "1", "--checkpoint-keep", "2")
	names := func(pattern string) []string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(ck, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for i := range m {
			m[i] = filepath.Base(m[i])
		}
		return m
	}
	if got := names("commit-*"); !slices.Equal(got, []string{"commit-0000000004", "commit-0000000005"}) {
		t.Fatalf("commit records %v; want 4 and 5", got)
	}
	if got := names("servers/*/ckpt-*"); len(got) != 4 || got[0] != "ckpt-0000000004" || got[1] != "ckpt-0000000005" {
		t.Fatalf("server parts %v; want 4 and 5 of each server", got)
	}
	part := filepath.Join(ck, "servers", "server-1", "ckpt-0000000005", "t1")
	b, err := os.ReadFile(part)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(part, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := train("--passes", "5", "--resume", ck, "--checkpoint-every", "1")
	if !strings.Contains(out, "lr trained 32561 examples") {
		t.Fatalf("resume with checkpoint 5's part damaged: want pass 5 trained again from checkpoint 4\n%s", out)
	}
	// The checkpoint after pass 5 is numbered past the damaged 5, whose
	// parts every server still holds: numbered 5, it was abandoned.
	if got := names("commit-*"); !slices.Contains(got, "commit-0000000006") {
		t.Errorf("commit records %v after the resume checkpointed pass 5 again; want 6\n%s", got, out)
	}
}

// runTrain runs terrace train with args and --report report, failing
// the test if it fails, and returns the report and the output.
func runTrain(t *testing.T, report string, args ...string) (map[string]any, string) {
	t.Helper()
	out, err := exec.Command(terrace(t), append([]string{"train", "--report", report}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("train %v: %v\n%s", args, err, out)
	}
	var rep map[string]any
	b, _ := os.ReadFile(report)
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep, string(out)
}

// TestOwnTrainWithoutTest: lr on data of one's own with no --test is not
// scored on the shipped a9a test split (figures of another data set, as
// before): the report holds no test metric, and the run says why.
func TestOwnTrainWithoutTest(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "own.svm")
	if err := os.WriteFile(own, []byte("1 1:0.5 3:1\n0 2:1\n1 1:1 4:0.2\n0 3:0.4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, out := runTrain(t, filepath.Join(dir, "r.json"), "--train", own, "--passes", "2")
	if _, ok := rep["test_accuracy"]; ok {
		t.Errorf("own --train without --test was scored on a test set: %v\n%s", rep["test_accuracy"], out)
	}
	if rep["examples"].(float64) != 8 || !strings.Contains(out, "no held-out evaluation") {
		t.Errorf("examples %v, want 8, and a word on the missing --test:\n%s", rep["examples"], out)
	}
}

// TestTrainMLR: `train --app mlr`, and `--app nn` (a hidden layer), on
// LIBSVM lines of three classes, each told by its own feature, learn them
// (test accuracy 1) and report the test metrics; mlr's --model is a
// liblinear model file of three classes (liblinear's predict scores data
// with it as mlr does: docs/design/mlr.md); nn's, written with the last
// pass's evaluation as mlr's, needs --test (TestNNModel checks the file).
func TestTrainMLR(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 300 {
		c := i % 3
		fmt.Fprintf(&b, "%d %d:1 %d:0.5\n", c, c+1, 4+i%5)
	}
	own := filepath.Join(dir, "three.svm")
	if err := os.WriteFile(own, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, app := range [][]string{{"--app", "mlr"}, {"--app", "nn", "--hidden", "8"}} {
		rep, out := runTrain(t, filepath.Join(dir, "r.json"), append(app, "--train", own, "--test", own, "--passes", "5")...)
		if acc, _ := rep["test_accuracy"].(float64); acc != 1 || rep["examples"].(float64) != 1500 || rep["app"] != app[1] {
			t.Errorf("%s: test accuracy %v (want 1), examples %v (want 1500), app %v\n%s", app[1], rep["test_accuracy"], rep["examples"], rep["app"], out)
		}
	}
	model := filepath.Join(dir, "mlr.model")
	runTrain(t, filepath.Join(dir, "m.json"), "--app", "mlr", "--train", own, "--test", own, "--passes", "2", "--model", model)
	raw, err := os.ReadFile(model)
	if want := "solver_type L2R_LR\nnr_class 3\nlabel 0 1 2\nnr_feature 8\nbias 1\nw\n"; err != nil || !strings.HasPrefix(string(raw), want) || strings.Count(string(raw), "\n") != 6+9 {
		t.Errorf("mlr --model: %v\n%s", err, raw)
	}
	if out, err := exec.Command(terrace(t), "train", "--app", "nn", "--train", own, "--model", filepath.Join(dir, "m")).CombinedOutput(); err == nil || !strings.Contains(string(out), "--app nn writes its --model with the last pass's evaluation: give --test too") {
		t.Errorf("--model with nn and no --test: %v\n%s", err, out)
	}
}

// TestTrainLasso: `train --app lasso` on the shipped a9a (its labels the
// targets) reports the objective, a sparse model and its schedule's
// skipped coordinates; a bigger --l1 zeroes more weights.
func TestTrainLasso(t *testing.T) {
	dir := t.TempDir()
	data := []string{"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz")}
	rep, out := runTrain(t, filepath.Join(dir, "r.json"), append([]string{"--app", "lasso", "--passes", "12"}, data...)...)
	obj, _ := rep["objective"].(float64)
	nz, _ := rep["nonzero"].(float64)
	if obj <= 0 || nz < 1 || rep["coordinate_updates"] == nil || rep["coordinates_skipped"] == nil || rep["test_rmse"] == nil {
		t.Fatalf("report: objective %v, nonzero %v, updates %v, skipped %v, test RMSE %v\n%s", rep["objective"], rep["nonzero"], rep["coordinate_updates"], rep["coordinates_skipped"], rep["test_rmse"], out)
	}
	model := filepath.Join(dir, "lasso.model")
	strong, out := runTrain(t, filepath.Join(dir, "s.json"), append([]string{"--app", "lasso", "--passes", "12", "--l1", "0.1", "--model", model}, data...)...)
	if b, err := os.ReadFile(model); err != nil || !strings.HasPrefix(string(b), "solver_type L2R_L2LOSS_SVR\nnr_class 2\nnr_feature 123\nbias 1\nw\n") {
		t.Errorf("lasso --model: %v\n%s", err, b)
	}
	if snz, _ := strong["nonzero"].(float64); snz >= nz {
		t.Errorf("--l1 0.1 left %v nonzero weights, the default %v\n%s", snz, nz, out)
	}
	// predict scores the model file as the job did (it was refused as
	// not a binary logistic regression model).
	pred := filepath.Join(dir, "lasso.pred")
	b, err := exec.Command(terrace(t), "predict", "--model", model, "--data", repoFile("datasets/a9a/a9a.t.gz"), "--out", pred).CombinedOutput()
	want := fmt.Sprintf("RMSE %.4f", strong["test_rmse"])
	if err != nil || !strings.Contains(string(b), want) {
		t.Errorf("predict with lasso's model: %v, want %q\n%s", err, want, b)
	}
	if lines, err := os.ReadFile(pred); err != nil || strings.Count(string(lines), "\n") != 16281 {
		t.Errorf("predict --out: %v, %d lines, want one per example of a9a.t", err, strings.Count(string(lines), "\n"))
	}
}
