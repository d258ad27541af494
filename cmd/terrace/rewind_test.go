package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// testAccuracy finds the last pass's test accuracy in what a worker
// printed.
var testAccuracy = regexp.MustCompile(`test accuracy (\d\.\d+)`)

// TestKilledServersGoBackToCheckpoint: with --on-copies-lost resume, two
// servers of three with k = 2 SIGKILLed at once make the live cluster go
// back to its newest checkpoint, taken inside the pass before, with no
// process restarted: once back, the model the servers hold is the checkpoint's
// exactly (its export is the checkpoint's, byte for byte: nothing of the
// slots that lost every copy is missing, and nothing trained after the
// checkpoint is left), and the job then finishes at a normal test
// accuracy. The worker is stopped (SIGSTOP) around the kill so that what
// the servers hold can be compared while nothing is pushed. Without the
// option the slots lost are started again empty, and the export differs.
func TestKilledServersGoBackToCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs five processes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	// A failure timeout the stopped worker stays well within; the killed
	// servers' connections close at once.
	c, cw := startWatched(t, ctx, "job 1 done", "coordinator", "--listen", "127.0.0.1:0", "--in-memory",
		"--servers", "3", "--workers", "1", "--replication", "2", "--failure-timeout", "60s",
		"--checkpoint-dir", ckpt, "--on-copies-lost", "resume")
	defer func() {
		c.Process.Signal(syscall.SIGTERM)
		c.Wait()
	}()
	for !strings.Contains(cw.String(), "listening on") {
		select {
		case <-ctx.Done():
			t.Fatalf("the coordinator never listened:\n%s", cw)
		case <-time.After(10 * time.Millisecond):
		}
	}
	f := strings.Fields(cw.String())
	addr := strings.TrimSuffix(f[slicesIndex(f, "on")+1], ",")
	var servers []*exec.Cmd
	for i := range 3 {
		s, _ := startWatched(t, ctx, "joined", "server", "--coordinator", addr, "--id", fmt.Sprintf("s%d", i))
		servers = append(servers, s)
	}
	defer killAll(servers[2])
	// Minibatches of 10 rows make a pass last about a second, so that
	// the checkpoint falls in the first.
	w, ww := startWatched(t, ctx, "", "worker", "--coordinator", addr, "--id", "w0",
		"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"), "--passes", "3", "--batch", "10")
	stopped := false
	defer func() {
		if stopped {
			w.Process.Signal(syscall.SIGCONT)
		}
	}()

	// A checkpoint inside the first pass, then rows of the next trained
	// after it.
	statusUntil(t, ctx, addr, func(st api.Status) bool { return st.Job.Examples > 0 })
	if out, err := exec.CommandContext(ctx, terrace(t), "checkpoint", "--coordinator", addr, "--now", "--wait").CombinedOutput(); err != nil {
		t.Fatalf("checkpoint --now: %v\n%s", err, out)
	}
	pass := statusUntil(t, ctx, addr, func(api.Status) bool { return true }).Job.Pass
	st := statusUntil(t, ctx, addr, func(st api.Status) bool { return st.Job.Pass > pass && st.Job.Pass < 3 })
	w.Process.Signal(syscall.SIGSTOP)
	stopped = true

	killAll(servers[:2]...)
	statusUntil(t, ctx, addr, func(st api.Status) bool { return st.CopiesLost > 0 })
	var ev string
	back, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	for !strings.Contains(ev, "back at checkpoint 1") {
		select {
		case <-back.Done():
			t.Fatalf("the cluster never went back to checkpoint 1:\n%s\ncoordinator:\n%s", ev, cw)
		case <-time.After(100 * time.Millisecond):
		}
		ev = events(t, ctx, addr)
	}
	live, saved := filepath.Join(dir, "live.model"), filepath.Join(dir, "ckpt.model")
	for _, args := range [][]string{{"--coordinator", addr, "--out", live}, {"--checkpoint-dir", ckpt, "--out", saved}} {
		if out, err := exec.CommandContext(ctx, terrace(t), append([]string{"export"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("export %v: %v\n%s", args, err, out)
		}
	}
	a, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("back at checkpoint 1, the servers' model is not the checkpoint's (%d and %d bytes)", len(a), len(b))
	}

	w.Process.Signal(syscall.SIGCONT)
	stopped = false
	if err := w.Wait(); err != nil {
		t.Fatalf("the worker after the cluster went back: %v\n%s", err, ww)
	}
	if !strings.Contains(ww.String(), "its passes start again from the checkpoint's") {
		t.Errorf("the worker never went back:\n%s", ww)
	}
	if !strings.Contains(ev, "going back to checkpoint 1 (inside pass 1)") {
		t.Errorf("the cluster, in pass %d, did not go back to the checkpoint inside pass 1:\n%s", st.Job.Pass, ev)
	}
	m := testAccuracy.FindAllStringSubmatch(ww.String(), -1)
	if len(m) == 0 {
		t.Fatalf("the worker printed no test accuracy:\n%s", ww)
	}
	if acc, _ := strconv.ParseFloat(m[len(m)-1][1], 64); acc < 0.84 {
		t.Errorf("test accuracy %.4f after going back, want the usual 0.84 or more:\n%s", acc, ww)
	}
	out, err := exec.CommandContext(ctx, terrace(t), "status", "--coordinator", addr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "REWOUND  the cluster went back to its newest checkpoint after slots lost every copy, once") {
		t.Errorf("terrace status: %v\n%s", err, out)
	}
	if !strings.Contains(cw.String(), "the cluster goes back to the newest checkpoint") {
		t.Errorf("the coordinator logged no warning:\n%s", cw)
	}
	t.Logf("terrace status:\n%s\nterrace events:\n%s", out, events(t, ctx, addr))
}
