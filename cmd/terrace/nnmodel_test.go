package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeNoisyClasses writes LIBSVM lines of three classes that overlap
// (each class lifts every third of features 1 to 9, under noise), so
// that a small network scores them well but not perfectly: a test that
// compares two accuracies then compares more than two 1s. extra, when
// set, is a feature index that every fourth row also has.
func writeNoisyClasses(t *testing.T, path string, rows int, seed uint64, extra int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	for i := range rows {
		c := i % 3
		fmt.Fprintf(&b, "%d", c)
		for f := 1; f <= 9; f++ {
			v := r.NormFloat64() * 0.8
			if f%3 == c {
				v += 1
			}
			fmt.Fprintf(&b, " %d:%.3f", f, v)
		}
		if extra > 0 && i%4 == 0 {
			fmt.Fprintf(&b, " %d:0.5", extra)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestNNModel: nn's --model file, the one exported from the job's
// checkpoint, and predict agree: the two files are the same bytes
// (feature 12, only the test data's, has the hidden layer's random
// initial weights in both: a checkpoint holds only pushed keys),
// predict scores the test data exactly as the job's own last evaluation
// did, --out gives each example's class and probabilities, and a file
// cut short is refused naming it and its line.
func TestNNModel(t *testing.T) {
	dir := t.TempDir()
	train, test := filepath.Join(dir, "train.svm"), filepath.Join(dir, "test.svm")
	writeNoisyClasses(t, train, 600, 1, 0)
	writeNoisyClasses(t, test, 300, 2, 12)
	ck, live, exported := filepath.Join(dir, "ck"), filepath.Join(dir, "live.model"), filepath.Join(dir, "ck.model")
	rep := trainWithCheckpoint(t, ck, live, "--app", "nn", "--hidden", "8", "--train", train, "--test", test)
	exportFrom(t, ck, exported)
	a, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(exported); err != nil || !bytes.Equal(a, b) {
		t.Fatalf("the model exported from the checkpoint differs from the job's --model (%v)", err)
	}
	acc, ll := rep["test_accuracy"].(float64), rep["test_logloss"].(float64)
	if acc <= 0.5 || acc >= 1 {
		t.Fatalf("the job's test accuracy %v: want one between 0.5 and 1, for the comparison below to mean something", acc)
	}
	pred := filepath.Join(dir, "pred.txt")
	out, err := exec.Command(terrace(t), "predict", "--model", live, "--data", test, "--out", pred).CombinedOutput()
	want := fmt.Sprintf("300 examples, accuracy %.4f (%d/300)  logloss %.4f", acc, int(acc*300+0.5), ll)
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("predict: %v\n%s\nwant %q (the job's last evaluation)", err, out, want)
	}
	lines, right := strings.Split(strings.TrimSuffix(readString(t, pred), "\n"), "\n"), 0
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("--out line %d: %q; want the class and 3 probabilities", i+1, l)
		}
		if f[0] == fmt.Sprint(i%3) {
			right++
		}
	}
	if len(lines) != 300 || right != int(acc*300+0.5) {
		t.Errorf("--out: %d lines, %d classes right; want 300 and %d", len(lines), right, int(acc*300+0.5))
	}
	// Cut short after the header, in the middle of a row.
	cut := filepath.Join(dir, "cut.model")
	if err := os.WriteFile(cut, a[:bytes.Index(a, []byte("\nhidden 3 "))+12], 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(terrace(t), "predict", "--model", cut, "--data", test).CombinedOutput()
	if err == nil || !strings.Contains(string(out), cut+":11: not a whole nn model file") {
		t.Fatalf("predict with a model cut short: %v\n%s\nwant it refused at %s:11 (the row of feature 3)", err, out, cut)
	}
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPredictMLR: predict scores mlr's liblinear file of three classes
// exactly as the job's own last evaluation did (it was refused as not a
// binary model), --out gives each example's class and probabilities,
// and the model exported from the job's checkpoint is the same bytes.
func TestPredictMLR(t *testing.T) {
	dir := t.TempDir()
	train, test, model := filepath.Join(dir, "train.svm"), filepath.Join(dir, "test.svm"), filepath.Join(dir, "mlr.model")
	writeNoisyClasses(t, train, 600, 1, 0)
	writeNoisyClasses(t, test, 300, 2, 12)
	ck, exported := filepath.Join(dir, "ck"), filepath.Join(dir, "ck.model")
	rep := trainWithCheckpoint(t, ck, model, "--app", "mlr", "--train", train, "--test", test)
	exportFrom(t, ck, exported)
	a, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(exported); err != nil || !bytes.Equal(a, b) {
		t.Fatalf("the model exported from the checkpoint differs from the job's --model (%v)", err)
	}
	acc, ll := rep["test_accuracy"].(float64), rep["test_logloss"].(float64)
	if acc <= 0.5 || acc >= 1 {
		t.Fatalf("the job's test accuracy %v: want one between 0.5 and 1, for the comparison below to mean something", acc)
	}
	pred := filepath.Join(dir, "pred.txt")
	out, err := exec.Command(terrace(t), "predict", "--model", model, "--data", test, "--out", pred).CombinedOutput()
	want := fmt.Sprintf("300 examples, accuracy %.4f (%d/300)  logloss %.4f", acc, int(acc*300+0.5), ll)
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("predict: %v\n%s\nwant %q (the job's last evaluation)", err, out, want)
	}
	if lines := strings.Split(strings.TrimSuffix(readString(t, pred), "\n"), "\n"); len(lines) != 300 || len(strings.Fields(lines[0])) != 4 {
		t.Errorf("--out: %d lines, the first %q; want 300, each the class and 3 probabilities", len(lines), lines[0])
	}
}
