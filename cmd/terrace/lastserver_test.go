package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLastServerReplacedUnderNewID: the only server SIGKILLed mid-job and
// started again the README's way, at its --listen port without --id (so
// under a new ID): the new server takes the dead one's place on the ring,
// its slots reported lost (k = 1), and the worker finishes the job.
// Before, the coordinator kept the dead server on the ring and the new
// one joining for good, and the worker exited 1 at its --join-timeout.
func TestLastServerReplacedUnderNewID(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, cw := startWatched(t, ctx, "every copy of some slots is lost", "coordinator", "--listen", "127.0.0.1:0", "--in-memory",
		"--servers", "1", "--workers", "1", "--replication", "1")
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	addr := coordinatorAddr(t, ctx, cw)
	listen := freePorts(t, 1)[0]
	s1, sw1 := startWatched(t, ctx, "joined", "server", "--coordinator", addr, "--listen", listen, "--id", "s0")
	t.Cleanup(func() { s1.Process.Kill(); s1.Wait() })
	sw1.await(t, ctx)
	w, ww := startWatched(t, ctx, "pass 10/", "worker", "--coordinator", addr, "--app", "lr", "--train", repoFile(defaultTrain),
		"--test", repoFile(defaultTest), "--passes", "200", "--join-timeout", "20s", "--log-level", "warn")
	t.Cleanup(func() { w.Process.Kill(); w.Wait() })
	ww.await(t, ctx)
	s1.Process.Signal(syscall.SIGKILL)
	s1.Wait()
	if strings.Contains(ww.String(), "pass 200/200") {
		t.Skip("the job finished before its server was killed")
	}
	s2, sw2 := startWatched(t, ctx, "joined", "server", "--coordinator", addr, "--listen", listen)
	t.Cleanup(func() { s2.Process.Kill(); s2.Wait() })
	if err := w.Wait(); err != nil || !strings.Contains(ww.String(), "pass 200/200") {
		t.Fatalf("the worker, its only server killed and started again without --id: %v\n%s\ncoordinator:\n%s\nnew server:\n%s", err, ww, cw, sw2)
	}
	out := cw.String()
	if !strings.Contains(out, "the last server on the ring, found dead, is taken off the ring") ||
		!strings.Contains(out, "every copy of some slots is lost") {
		t.Fatalf("the coordinator did not say that the new server took the dead one's place and its slots were lost:\n%s", out)
	}
}
