package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/control/coord"
)

// trainWithCheckpoint trains args for two passes with a checkpoint after
// the last and the job's own --model (live) and returns its report.
func trainWithCheckpoint(t *testing.T, ck, live string, args ...string) map[string]any {
	t.Helper()
	report := filepath.Join(filepath.Dir(ck), "r.json")
	args = append([]string{"train", "--passes", "2", "--checkpoint-dir", ck, "--checkpoint-every", "2", "--model", live, "--report", report}, args...)
	out, err := exec.Command(terrace(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("terrace: model written to "+live+"\n")) {
		t.Errorf("train --model %s does not say it wrote the model:\n%s", live, out)
	}
	var rep map[string]any
	b, _ := os.ReadFile(report)
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func exportFrom(t *testing.T, ck, out string) {
	t.Helper()
	if b, err := exec.Command(terrace(t), "export", "--checkpoint-dir", ck, "--out", out).CombinedOutput(); err != nil {
		t.Fatalf("export --checkpoint-dir: %v\n%s", err, b)
	}
}

// TestExportCheckpoint exports each app's model from a checkpoint
// directory alone (no cluster) and checks it against the model the job
// wrote itself after the same pass: lr's scores a9a.t as the job's last
// evaluation did (predict), mf's predicts the same RMSE, lda's topics are
// the same. A directory with no committed checkpoint is refused by name.
func TestExportCheckpoint(t *testing.T) {
	t.Run("lr", func(t *testing.T) {
		dir := t.TempDir()
		ck, live, exported := filepath.Join(dir, "ck"), filepath.Join(dir, "live.model"), filepath.Join(dir, "ck.model")
		test := repoFile("datasets/a9a/a9a.t.gz")
		rep := trainWithCheckpoint(t, ck, live, "--train", repoFile("datasets/a9a/a9a.gz"), "--test", test)
		exportFrom(t, ck, exported)
		want := fmt.Sprintf("accuracy %.4f", rep["test_accuracy"])
		for _, m := range []string{live, exported} {
			out, err := exec.Command(terrace(t), "predict", "--model", m, "--data", test).CombinedOutput()
			if err != nil || !strings.Contains(string(out), want) {
				t.Fatalf("predict --model %s: %v\n%s\nwant %q (the job's last evaluation)", filepath.Base(m), err, out, want)
			}
		}
		out, err := exec.Command(terrace(t), "export", "--checkpoint-dir", dir, "--out", exported).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--checkpoint-dir "+dir) || !strings.Contains(string(out), "no complete checkpoint") {
			t.Fatalf("export from a directory without checkpoints: %v\n%s", err, out)
		}
	})
	t.Run("moved data", func(t *testing.T) {
		dir := t.TempDir()
		ck, live, exported := filepath.Join(dir, "ck"), filepath.Join(dir, "live.model"), filepath.Join(dir, "ck.model")
		raw, err := os.ReadFile(repoFile("datasets/a9a/a9a.gz"))
		if err != nil {
			t.Fatal(err)
		}
		train, moved := filepath.Join(dir, "a9a.gz"), filepath.Join(dir, "moved.gz")
		if err := os.WriteFile(train, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		trainWithCheckpoint(t, ck, live, "--train", train, "--test", repoFile("datasets/a9a/a9a.t.gz"))
		if err := os.Rename(train, moved); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(terrace(t), "export", "--checkpoint-dir", ck, "--out", exported).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "the job's training data "+train+" is not there (moved? give --train") {
			t.Fatalf("export of a checkpoint whose data moved: %v\n%s", err, out)
		}
		if out, err := exec.Command(terrace(t), "export", "--checkpoint-dir", ck, "--out", exported, "--train", moved).CombinedOutput(); err != nil {
			t.Fatalf("export --train with the data where it is now: %v\n%s", err, out)
		}
		// An empty --train read the model at no scale, and an --out that
		// could not be written was found after the model was read.
		empty := filepath.Join(dir, "empty.svm")
		if err := os.WriteFile(empty, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--out", exported, "--train", empty}, "the job's training data " + empty + " has no rows"},
			{[]string{"--out", dir, "--train", moved}, "--out " + dir + " is a directory"},
			{[]string{"--out", filepath.Join(dir, "none", "m"), "--train", moved}, "--out " + filepath.Join(dir, "none", "m") + ": its directory: "},
		} {
			out, err := exec.Command(terrace(t), append([]string{"export", "--checkpoint-dir", ck}, tc.args...)...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("export %v: %v\n%s\nwant %q", tc.args, err, out, tc.want)
			}
		}
	})
	t.Run("mf", func(t *testing.T) {
		train, ok := data.SharedPath("ratings/ml-100k/u1.base")
		test, ok2 := data.SharedPath("ratings/ml-100k/u1.test")
		if !ok || !ok2 {
			t.Skip("MovieLens 100K not found under ../shared/data/ratings/ml-100k")
		}
		dir := t.TempDir()
		ck, live, exported := filepath.Join(dir, "ck"), filepath.Join(dir, "live"), filepath.Join(dir, "exported")
		trainWithCheckpoint(t, ck, live, "--app", "mf", "--train", train, "--test", test)
		exportFrom(t, ck, exported)
		var got []string
		for _, m := range []string{live, exported} {
			out, err := exec.Command(terrace(t), "predict", "--model", m, "--data", test).CombinedOutput()
			if err != nil {
				t.Fatalf("predict --model %s: %v\n%s", filepath.Base(m), err, out)
			}
			got = append(got, string(out))
		}
		if got[0] != got[1] {
			t.Fatalf("the job's model: %s; exported from its checkpoint: %s", got[0], got[1])
		}
	})
	t.Run("lda", func(t *testing.T) {
		dir := t.TempDir()
		ck, live, exported := filepath.Join(dir, "ck"), filepath.Join(dir, "live"), filepath.Join(dir, "exported")
		trainWithCheckpoint(t, ck, live, "--app", "lda", "--train", repoFile("datasets/kos/doc_word_count.tsv.gz"), "--vocab", repoFile("datasets/kos/dictionary.txt"))
		empty := filepath.Join(dir, "empty.tsv")
		if err := os.WriteFile(empty, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(terrace(t), "export", "--checkpoint-dir", ck, "--out", exported, "--train", empty).CombinedOutput(); err == nil || !strings.Contains(string(out), "has no rows") {
			t.Fatalf("export of lda with an empty --train: %v\n%s", err, out)
		}
		exportFrom(t, ck, exported)
		for _, f := range []string{"topic_word_counts.tsv", "top_words.tsv"} {
			a, err := os.ReadFile(filepath.Join(live, f))
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(exported, f))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Fatalf("%s differs between the job's model and the one exported from its checkpoint", f)
			}
		}
	})
}

// TestCheckpointDirOfAnotherJob: a job given a checkpoint directory that
// holds another job's checkpoints numbers its own after them, so that
// export (and --resume) take its newest. Numbered from 1, lr's checkpoint
// 1 replaced lasso's commit record 1, and export took lasso's checkpoint
// 2 as the newest.
func TestCheckpointDirOfAnotherJob(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	train := func(args ...string) {
		t.Helper()
		args = append([]string{"train", "--checkpoint-dir", ck, "--checkpoint-every", "1", "--train", repoFile(defaultTrain), "--test", repoFile(defaultTest)}, args...)
		if out, err := exec.Command(terrace(t), args...).CombinedOutput(); err != nil {
			t.Fatalf("train: %v\n%s", err, out)
		}
	}
	train("--app", "lasso", "--passes", "2")
	train("--app", "lr", "--passes", "1")
	out, err := exec.Command(terrace(t), "export", "--checkpoint-dir", ck, "--out", filepath.Join(dir, "m")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "exported the lr model of checkpoint 3 ") {
		t.Fatalf("export after lasso's two checkpoints and lr's one: %v\n%s", err, out)
	}
}

// TestExportSaysInsidePass: the export of a checkpoint taken inside pass
// 49 says so, as the status and checkpoint --wait do; it said "after
// pass 48", and the model holds rows of pass 49 too.
func TestExportSaysInsidePass(t *testing.T) {
	if got := committedWhere(coord.Committed{Pass: 47, InPass: &coord.InPass{Pass: 48}}); got != "inside pass 49" {
		t.Errorf("a checkpoint inside pass 49: %q", got)
	}
	if got := committedWhere(coord.Committed{Pass: 47}); got != "after pass 48" {
		t.Errorf("a checkpoint after pass 48: %q", got)
	}
}
