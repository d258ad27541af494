package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWholeClusterRestartResumes SIGKILLs a whole cluster (coordinator,
// server, worker) mid-job, after some checkpoints, and starts it again as
// the README says: the coordinator on the same --etcd-dir with --resume,
// a new server, a worker with no job flags. Every copy of the model died
// with the server, so the coordinator resumes from the newest checkpoint
// instead of etcd's newer state, and the job finishes from there. Before,
// it passed --resume over and the job trained on from zero (or, with the
// server under a new ID, waited for the old one for good).
func TestWholeClusterRestartResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs six processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	coordArgs := []string{"coordinator", "--listen", "127.0.0.1:0", "--servers", "1", "--workers", "1", "--replication", "1",
		"--etcd-dir", filepath.Join(dir, "etcd"), "--checkpoint-dir", ck, "--checkpoint-every", "2"}
	c1, co1 := startWatched(t, ctx, "waiting for", coordArgs...)
	t.Cleanup(func() { c1.Process.Kill(); c1.Wait() })
	addr := coordinatorAddr(t, ctx, co1)
	s1, so1 := startWatched(t, ctx, "\n", "server", "--coordinator", addr, "--log-level", "warn")
	t.Cleanup(func() { s1.Process.Kill(); s1.Wait() })
	w1, wo1 := startWatched(t, ctx, "pass 12/", "worker", "--coordinator", addr, "--app", "lr", "--train", repoFile(defaultTrain),
		"--test", repoFile(defaultTest), "--passes", "80", "--log-level", "warn")
	t.Cleanup(func() { w1.Process.Kill(); w1.Wait() })
	select {
	case <-wo1.seen:
	case <-ctx.Done():
		t.Fatalf("the first run never reached pass 12\n%s\n%s", co1, so1)
	}
	for _, p := range []*exec.Cmd{c1, s1, w1} {
		p.Process.Signal(syscall.SIGKILL)
		p.Wait()
	}
	before := wo1.String()
	if strings.Contains(before, "pass 80/80") {
		t.Skip("the first run finished before it was killed")
	}

	c2, co2 := startWatched(t, ctx, "resuming from the newest checkpoint", append(coordArgs, "--resume", "--exit-when-done")...)
	t.Cleanup(func() { c2.Process.Kill(); c2.Wait() })
	addr = coordinatorAddr(t, ctx, co2)
	s2, so2 := startWatched(t, ctx, "\n", "server", "--coordinator", addr, "--log-level", "warn")
	t.Cleanup(func() { s2.Process.Kill(); s2.Wait() })
	w2, wo2 := startWatched(t, ctx, "pass 80/80", "worker", "--coordinator", addr, "--log-level", "warn")
	if err := w2.Wait(); err != nil {
		t.Fatalf("the worker after the restart: %v\n%s\ncoordinator:\n%s\nserver:\n%s", err, wo2, co2, so2)
	}
	if err := c2.Wait(); err != nil {
		t.Fatalf("the coordinator after the restart: %v\n%s", err, co2)
	}
	after := wo2.String()
	select {
	case <-co2.seen:
	default:
		t.Fatalf("the coordinator did not resume from the checkpoint:\n%s", co2)
	}
	if !strings.Contains(after, "pass 80/80") {
		t.Fatalf("the job did not finish after the restart:\n%s", after)
	}
	// The passes the checkpoint holds are not trained again: the first
	// pass evaluated after the restart comes after them.
	first := regexp.MustCompile(`pass +(\d+)/80`).FindStringSubmatch(after)
	if first == nil || first[1] == "1" {
		t.Errorf("after the restart the job trained from pass 1, not from the checkpoint:\n%s", after)
	}
}

// coordinatorAddr waits until a coordinator's output w says where it
// listens, and returns the address.
func coordinatorAddr(t *testing.T, ctx context.Context, w *lineWatcher) string {
	t.Helper()
	re := regexp.MustCompile(`listening on (\S+),`)
	for ctx.Err() == nil {
		if m := re.FindStringSubmatch(w.String()); m != nil {
			return m[1]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the coordinator never said where it listens:\n%s", w)
	return ""
}

// TestCoordinatorRestartKeepsState: the coordinator alone SIGKILLed
// mid-job and started again with --resume finds its server alive, keeps
// etcd's state (newer than any checkpoint) and the job goes on where it
// was: the checkpoint is for a cluster whose every server is gone.
func TestCoordinatorRestartKeepsState(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	coordArgs := []string{"coordinator", "--listen", "127.0.0.1:0", "--servers", "1", "--workers", "1", "--replication", "1",
		"--etcd-dir", filepath.Join(dir, "etcd"), "--checkpoint-dir", filepath.Join(dir, "ck"), "--checkpoint-every", "5"}
	c1, co1 := startWatched(t, ctx, "waiting for", coordArgs...)
	t.Cleanup(func() { c1.Process.Kill(); c1.Wait() })
	addr := coordinatorAddr(t, ctx, co1)
	s, so := startWatched(t, ctx, "\n", "server", "--coordinator", addr, "--log-level", "warn")
	t.Cleanup(func() { s.Process.Kill(); s.Wait() })
	w, wo := startWatched(t, ctx, "pass 12/", "worker", "--coordinator", addr, "--app", "lr", "--train", repoFile(defaultTrain),
		"--test", repoFile(defaultTest), "--passes", "80", "--log-level", "warn")
	t.Cleanup(func() { w.Process.Kill(); w.Wait() })
	wo.await(t, ctx)
	c1.Process.Signal(syscall.SIGKILL)
	c1.Wait()
	// The nodes know only its address: it listens there again.
	again := append(slices.Clone(coordArgs), "--resume")
	again[slices.Index(again, "127.0.0.1:0")] = addr
	c2, co2 := startWatched(t, ctx, "--resume passed over", again...)
	t.Cleanup(func() { c2.Process.Kill(); c2.Wait() })
	if err := w.Wait(); err != nil {
		t.Fatalf("the worker: %v\n%s\ncoordinator:\n%s\nserver:\n%s", err, wo, co2, so)
	}
	select {
	case <-co2.seen:
	default:
		t.Fatalf("the restarted coordinator did not keep etcd's state:\n%s", co2)
	}
	if strings.Contains(co2.String(), "resuming from the newest checkpoint") {
		t.Errorf("the restarted coordinator went back to the checkpoint with its server alive:\n%s", co2)
	}
	// The passes evaluated before the restart are one line, not printed
	// again one by one as if new.
	if !strings.Contains(co1.String(), "pass 1 evaluated") {
		t.Fatalf("the first coordinator never printed pass 1:\n%s", co1)
	}
	if strings.Contains(co2.String(), "pass 1 evaluated") || !strings.Contains(co2.String(), "evaluated before this coordinator led") {
		t.Errorf("the restarted coordinator printed the earlier passes again:\n%s", co2)
	}
}
