package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/internal/control/coord"
)

// TestCheckpointDirWritable: periodic checkpoints into a directory that
// cannot be made or written in are refused at start, naming the flag;
// they were each abandoned with a WARN line, and the job ended without
// one and exited 0. A missing directory is made.
func TestCheckpointDirWritable(t *testing.T) {
	if _, err := os.Stat("/proc/self"); err != nil {
		t.Skip("no /proc: no directory even root cannot make")
	}
	if err := checkCheckpointFlags("/proc/terrace-no-such-dir/ckpt", 1, 3, false); err == nil || !strings.Contains(err.Error(), "--checkpoint-dir /proc/terrace-no-such-dir/ckpt") {
		t.Errorf("checkpoints every pass into /proc: %v, want a refusal naming --checkpoint-dir", err)
	}
	dir := filepath.Join(t.TempDir(), "new", "ckpt")
	if err := checkCheckpointFlags(dir, 1, 3, false); err != nil {
		t.Fatalf("a directory not made yet: %v", err)
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Errorf("the check left %v in %s (%v), want it made and empty", left, dir, err)
	}
}

// TestOnCopiesLostAuto: by default a cluster with a checkpoint directory
// goes back to its checkpoint when slots lose every copy, and one without
// goes on; a policy given is kept.
func TestOnCopiesLostAuto(t *testing.T) {
	for _, c := range []struct {
		flag, dir string
		want      coord.CopiesLostPolicy
	}{
		{onCopiesLostAuto, "ckpt", coord.OnCopiesLostResume},
		{onCopiesLostAuto, "", coord.OnCopiesLostContinue},
		{"continue", "ckpt", coord.OnCopiesLostContinue},
		{"resume", "ckpt", coord.OnCopiesLostResume},
	} {
		if got, err := checkOnCopiesLost(c.flag, c.dir); err != nil || got != c.want {
			t.Errorf("--on-copies-lost %s with --checkpoint-dir %q: %q, %v; want %q", c.flag, c.dir, got, err, c.want)
		}
	}
}
