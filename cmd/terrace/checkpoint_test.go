package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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
		out, err := exec.Command(terrace(t), append(append([]string{"train", "--report", report}, data...), args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("train %v: %v\n%s", args, err, out)
		}
		var rep map[string]any
		b, _ := os.ReadFile(report)
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
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
