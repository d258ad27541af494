package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestReachShortDeadline: a coordinator that answers is reached within a
// caller's deadline under a second. The deadline was rounded to whole
// seconds, to 0 under half a second, and checkpoint --wait --timeout
// 400ms said a live coordinator was unreachable.
func TestReachShortDeadline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 480*time.Millisecond)
	defer cancel()
	if err := reach(ctx, api.NewClient(srv.URL, nil), io.Discard, 30*time.Second); err != nil {
		t.Fatalf("reach with 480ms left: %v", err)
	}
}

// TestWorkerClusterNotFormed: a worker whose cluster does not form (its
// coordinator waits for a second worker) within its join timeout says so
// and names the flag. It said "ps: waiting for the cluster layout: ...
// context deadline exceeded".
func TestWorkerClusterNotFormed(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	addr := startCoordinator(t, ctx, "--in-memory", "--servers", "1", "--workers", "2", "--replication", "1")
	_, s := startWatched(t, ctx, "joined", "server", "--coordinator", addr, "--id", "s0")
	s.await(t, ctx)
	out, err := exec.CommandContext(ctx, terrace(t), "worker", "--coordinator", addr, "--join-timeout", "2s", "--log-level", "warn",
		"--train", repoFile(defaultTrain), "--test", repoFile(defaultTest), "--passes", "1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the cluster did not form within the join timeout (2s, --join-timeout)") {
		t.Fatalf("a worker of a cluster that never formed: %v\n%s", err, out)
	}
}

// TestWorkerServersGone: a worker of a formed cluster whose only server is
// gone says that its servers are unreachable when its join timeout ends.
// It said "the cluster did not form ... it waits for every server and
// worker its coordinator expects" (a whole cluster SIGKILLed, its
// coordinator started again on its --etcd-dir, the last server gone).
func TestWorkerServersGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	addr := startCoordinator(t, ctx, "--in-memory", "--servers", "1", "--workers", "1", "--replication", "1")
	s, sw := startWatched(t, ctx, "joined", "server", "--coordinator", addr, "--id", "s0")
	sw.await(t, ctx)
	s.Process.Kill()
	s.Wait()
	out, err := exec.CommandContext(ctx, terrace(t), "worker", "--coordinator", addr, "--join-timeout", "2s", "--log-level", "error",
		"--train", repoFile(defaultTrain), "--test", repoFile(defaultTest), "--passes", "1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no server of the cluster's ring answered within the join timeout (2s, --join-timeout)") ||
		!strings.Contains(string(out), "server s0") {
		t.Fatalf("a worker of a cluster whose server is gone: %v\n%s", err, out)
	}
}
