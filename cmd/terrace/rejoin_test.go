package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWorkerRejoinsAfterDeclaredDead stops one of two workers (SIGSTOP)
// for four failure timeouts mid-job: the coordinator declares it dead
// and gives its leases to the other. Continued, it finds its rank dead,
// joins again as a new worker (rank 2) and trains to the job's end; both
// workers exit 0. Before, it exited 1 ("rank 1 was declared dead") and
// the job went on a worker short. A paused or starved process on a
// shared host is what this is for.
func TestWorkerRejoinsAfterDeclaredDead(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := startCoordinator(t, ctx, "--servers", "1", "--workers", "2", "--replication", "1", "--failure-timeout", "1s")
	_, so := start(t, ctx, "server", "--coordinator", addr, "--id", "s0", "--log-level", "warn")
	go drain(so)
	job := []string{"--app", "lr", "--train", repoFile(defaultTrain), "--test", repoFile(defaultTest), "--passes", "60", "--log-level", "warn"}
	w0, out0 := startWatched(t, ctx, "pass ", append([]string{"worker", "--coordinator", addr, "--id", "w0"}, job...)...)
	w1, out1 := startWatched(t, ctx, "pass ", append([]string{"worker", "--coordinator", addr, "--id", "w1"}, job...)...)
	select {
	case <-out0.seen:
	case <-out1.seen:
	case <-ctx.Done():
		t.Fatalf("no pass finished\n%s\n%s", out0, out1)
	}
	if err := w1.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	if err := w1.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := w1.Wait(); err != nil {
		t.Fatalf("the stopped worker: %v\n%s", err, out1)
	}
	if err := w0.Wait(); err != nil {
		t.Fatalf("the other worker: %v\n%s", err, out0)
	}
	got := out1.String()
	if !strings.Contains(got, "joining again as a new worker") || !strings.Contains(got, "terrace worker: rank 2") {
		t.Errorf("the stopped worker did not join again as rank 2:\n%s", got)
	}
}
