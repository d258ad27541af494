package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSparseIDsKeepTheModelSparse: lr on LIBSVM data whose indices reach
// 20 million but which has a few thousand features stores about those
// on the servers. Each evaluation pulled the whole range of keys up to
// the largest index, and a pull creates what it reads: 10 million keys
// a server.
func TestSparseIDsKeepTheModelSparse(t *testing.T) {
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "%d %d:1 %d:1 %d:0.5\n", 2*(i%2)-1, 1+i%7, 1000+i*97, 20_000_000-i*13)
	}
	path := filepath.Join(t.TempDir(), "ids.svm")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, terrace(t), "train", "--train", path, "--test", path, "--passes", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	counts := regexp.MustCompile(`server-\d+: (\d+) keys`).FindAllSubmatch(out, -1)
	if len(counts) != 2 {
		t.Fatalf("no servers' key counts in the output:\n%s", out)
	}
	for _, c := range counts {
		// 407 features and the bias, each on both servers (k = 2).
		if n, _ := strconv.Atoi(string(c[1])); n > 1000 {
			t.Errorf("a server holds %d keys for 407 features:\n%s", n, out)
		}
	}
}

// TestSparseIDsClasses: nn on data whose indices reach 10^12 trains (its
// workers' scratch and evaluations are the data's features: sized by the
// largest index they asked for terabytes), its --model holds the 11
// features the data has (feature 10^12 + 3 only the test file's, with
// the hidden layer's initial weights), the model exported from its
// checkpoint is the same bytes, and predict scores the test data as the
// job did. mlr's --model, liblinear's line per index, is refused naming
// the flag.
func TestSparseIDsClasses(t *testing.T) {
	dir := t.TempDir()
	var train, test strings.Builder
	for i := range 600 {
		c := i % 3
		b := &train
		if i >= 450 {
			b = &test
		}
		fmt.Fprintf(b, "%d", c)
		for f := uint64(1); f <= 9; f++ {
			v := 0.8 * float64((i*7+int(f)*13)%11-5) / 5
			if int(f)%3 == c {
				v += 1
			}
			fmt.Fprintf(b, " %d:%.3f", f*100_000_000_000, v)
		}
		if b == &test && i%4 == 0 {
			fmt.Fprintf(b, " %d:0.5", uint64(1_000_000_000_003))
		}
		b.WriteByte('\n')
	}
	trainPath, testPath := filepath.Join(dir, "train.svm"), filepath.Join(dir, "test.svm")
	for p, s := range map[string]string{trainPath: train.String(), testPath: test.String()} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ck, live, exported := filepath.Join(dir, "ck"), filepath.Join(dir, "live.model"), filepath.Join(dir, "ck.model")
	rep := trainWithCheckpoint(t, ck, live, "--app", "nn", "--hidden", "8", "--train", trainPath, "--test", testPath)
	exportFrom(t, ck, exported)
	a := readString(t, live)
	if b := readString(t, exported); a != b {
		t.Fatalf("the model exported from the checkpoint differs from the job's --model")
	}
	if !strings.Contains(a, "\nfeatures 10\n") || !strings.Contains(a, "\nhidden 1000000000003 ") {
		t.Errorf("the model file does not list the data's 10 features:\n%.300s", a)
	}
	acc, ll := rep["test_accuracy"].(float64), rep["test_logloss"].(float64)
	out, err := exec.Command(terrace(t), "predict", "--model", live, "--data", testPath).CombinedOutput()
	want := fmt.Sprintf("150 examples, accuracy %.4f (%d/150)  logloss %.4f", acc, int(acc*150+0.5), ll)
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("predict: %v\n%s\nwant %q (the job's last evaluation)", err, out, want)
	}
	out, err = exec.Command(terrace(t), "train", "--app", "mlr", "--train", trainPath, "--test", testPath, "--model", filepath.Join(dir, "mlr.model")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--model") || !strings.Contains(string(out), "too wide for a liblinear model file") {
		t.Fatalf("mlr --model of indices up to 10^12: %v\n%s\nwant it refused naming --model", err, out)
	}
}

// TestLRModelTooWide: lr's --model is liblinear's line per index, so data
// whose indices reach 10^12 is refused before training, naming the flag,
// as mlr's and lasso's are (it pulled and wrote every index up to the
// largest).
func TestLRModelTooWide(t *testing.T) {
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, "%d 1:1 %d:0.5\n", 2*(i%2)-1, uint64(1_000_000_000_000)+uint64(i%3))
	}
	path := filepath.Join(t.TempDir(), "wide.svm")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, terrace(t), "train", "--train", path, "--test", path, "--passes", "1", "--model", filepath.Join(t.TempDir(), "lr.model")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--model") || !strings.Contains(string(out), "too wide for a liblinear model file") {
		t.Fatalf("lr --model of indices up to 10^12: %v\n%s\nwant it refused naming --model", err, out)
	}
}
