package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestProcessesCheckpointResume: train --processes passes its checkpoint
// flags to the coordinator: two passes with a checkpoint after each leave
// two committed checkpoints; with the newest commit record removed,
// --resume continues from the first and trains only the second pass, and
// the drill's audit, which counts the resumed checkpoint's updates as
// acknowledged, finds nothing lost, applied twice or skipped. Bad
// combinations fail at once, naming the flag (about 10 s).
func TestProcessesCheckpointResume(t *testing.T) {
	bin := terrace(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	data := []string{"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"), "--passes", "2", "--processes"}
	train := func(name string, args ...string) (map[string]any, string) {
		t.Helper()
		return runTrain(t, filepath.Join(dir, name+".json"), append(append([]string{"--run-dir", filepath.Join(dir, name)}, data...), args...)...)
	}
	train("first", "--checkpoint-dir", ck, "--checkpoint-every", "1")
	for _, f := range []string{"commit-0000000001", "commit-0000000002"} {
		if _, err := os.Stat(filepath.Join(ck, f)); err != nil {
			t.Fatalf("no committed checkpoint: %v", err)
		}
	}
	if err := os.Remove(filepath.Join(ck, "commit-0000000002")); err != nil {
		t.Fatal(err)
	}
	rep, out := train("resumed", "--resume", ck)
	if !strings.Contains(out, "resuming from checkpoint 1 (after pass 1") {
		t.Errorf("no resume from checkpoint 1 in the output:\n%s", out)
	}
	if n, _ := rep["examples"].(float64); n != 32561 {
		t.Errorf("the resume trained %v examples, want the second pass's 32561", rep["examples"])
	}
	for _, k := range []string{"acked_updates_lost", "acked_updates_duplicated", "examples_skipped", "examples_repeated"} {
		if v, ok := rep[k].(float64); !ok || v != 0 {
			t.Errorf("%s %v after the resume, want 0", k, rep[k])
		}
	}

	for _, c := range []struct{ args, want string }{
		{"--checkpoint-every 1", "--checkpoint-every needs --checkpoint-dir"},
		{"--resume " + filepath.Join(dir, "absent"), "no committed checkpoint"},
		{"--resume " + ck + " --checkpoint-dir " + dir, "--resume " + ck + " and --checkpoint-dir"},
		{"--on-copies-lost resume", "--on-copies-lost resume needs --checkpoint-dir"},
		{"--on-copies-lost maybe --checkpoint-dir " + dir, `--on-copies-lost "maybe": want auto, continue or resume`},
	} {
		out, err := exec.Command(bin, append(append([]string{"train"}, data...), strings.Fields(c.args)...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("train %s: %v, want an error saying %q\n%s", c.args, err, c.want, out)
		}
	}
}
