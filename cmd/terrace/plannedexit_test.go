package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startJobCluster starts a coordinator with args on any loopback port, n
// servers and one worker that trains a one-pass lr job, and waits until
// the worker has exited 0. It returns the coordinator, what it said, its
// address and the servers.
func startJobCluster(t *testing.T, ctx context.Context, n int, args ...string) (*exec.Cmd, *lineWatcher, string, []*exec.Cmd, []*lineWatcher) {
	t.Helper()
	c, cw := startWatched(t, ctx, "job 1 done", append([]string{"coordinator", "--listen", "127.0.0.1:0", "--in-memory",
		"--servers", fmt.Sprint(n), "--workers", "1", "--replication", "2"}, args...)...)
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
	var sws []*lineWatcher
	for i := range n {
		s, sw := startWatched(t, ctx, "joined", "server", "--coordinator", addr, "--id", fmt.Sprintf("s%d", i))
		servers, sws = append(servers, s), append(sws, sw)
	}
	out, err := exec.CommandContext(ctx, terrace(t), "worker", "--coordinator", addr, "--id", "w0",
		"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"), "--passes", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("worker: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "server unreachable") {
		t.Errorf("the worker warned of servers that exit with the cluster:\n%s", out)
	}
	return c, cw, addr, servers, sws
}

// events returns the coordinator's timeline as events prints it.
func events(t *testing.T, ctx context.Context, addr string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, terrace(t), "events", "--coordinator", addr).CombinedOutput()
	if err != nil {
		t.Fatalf("events: %v\n%s", err, out)
	}
	return string(out)
}

// TestServersDrainAfterJob: on a cluster that stays up, servers given
// SIGTERM after the job drain as during one: two at once hand their slots
// to the third (they left at once, were recorded as failed, and with both
// copies of a slot gone export failed), the model stays exportable, and
// the last server leaves saying that the model goes with it. No exit is
// a failure on the timeline.
func TestServersDrainAfterJob(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs five processes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, cw, addr, servers, sws := startJobCluster(t, ctx, 3)
	cw.await(t, ctx)
	for _, s := range servers[:2] {
		s.Process.Signal(syscall.SIGTERM)
	}
	for i, s := range servers[:2] {
		if err := s.Wait(); err != nil {
			t.Fatalf("s%d after SIGTERM: %v\n%s", i, err, sws[i])
		}
	}
	model := filepath.Join(t.TempDir(), "a9a.model")
	if out, err := exec.CommandContext(ctx, terrace(t), "export", "--coordinator", addr, "--out", model, "--timeout", "10s").CombinedOutput(); err != nil {
		t.Fatalf("export after two of three servers drained: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(model); err != nil || !strings.Contains(string(b), "nr_feature") {
		t.Fatalf("exported model: %v\n%.200s", err, b)
	}
	servers[2].Process.Signal(syscall.SIGTERM)
	if err := servers[2].Wait(); err != nil {
		t.Fatalf("the last server after SIGTERM: %v\n%s", err, sws[2])
	}
	if !strings.Contains(sws[2].String(), "the job's model goes with it") {
		t.Errorf("the last server left after the job without saying the model went with it:\n%s", sws[2])
	}
	// The coordinator knows the model left with the last server: export
	// says so at once (it waited its whole --timeout, then said that no
	// server answered).
	out, err := exec.CommandContext(ctx, terrace(t), "export", "--coordinator", addr, "--out", model+".2", "--timeout", "20s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), errModelGone.Error()) {
		t.Errorf("export after the last server left: %v, want %q:\n%s", err, errModelGone, out)
	}
	ev := events(t, ctx, addr)
	for _, want := range []string{"s0: drained: left the ring", "s1: drained: left the ring", "s2: the last server left after job 1"} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %q:\n%s", want, ev)
		}
	}
	if strings.Contains(ev, " failed ") {
		t.Errorf("a planned exit on the timeline as a failure:\n%s", ev)
	}
	c.Process.Signal(syscall.SIGTERM)
	c.Wait()
}

// TestExitWhenDoneIsNoFailure: at --exit-when-done the servers' exits are
// the cluster's planned end, not failures (each was "failed", its slots
// copied again), and events --follow ends 0 saying so (it retried the
// coordinator for 30 s, then exited 1).
func TestExitWhenDoneIsNoFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs five processes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, cw := startWatched(t, ctx, "listening on", "coordinator", "--listen", "127.0.0.1:0", "--in-memory",
		"--servers", "2", "--workers", "1", "--replication", "2", "--exit-when-done")
	cw.await(t, ctx)
	f := strings.Fields(cw.String())
	addr := strings.TrimSuffix(f[slicesIndex(f, "on")+1], ",")
	follow, fw := startWatched(t, ctx, "shut down as planned", "events", "--coordinator", addr, "--follow")
	var servers []*exec.Cmd
	for i := range 2 {
		s, _ := startWatched(t, ctx, "joined", "server", "--coordinator", addr, "--id", fmt.Sprintf("s%d", i))
		servers = append(servers, s)
	}
	out, err := exec.CommandContext(ctx, terrace(t), "worker", "--coordinator", addr, "--id", "w0",
		"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"), "--passes", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("worker: %v\n%s", err, out)
	}
	for _, p := range append(servers, c) {
		if err := p.Wait(); err != nil {
			t.Errorf("%v: %v", p.Args[1:3], err)
		}
	}
	if err := follow.Wait(); err != nil {
		t.Errorf("events --follow after the cluster ended as planned: %v\n%s", err, fw)
	}
	got := fw.String()
	for _, want := range []string{"end        job 1 done: the cluster ends with it", "s0: exited with the cluster", "s1: exited with the cluster", "shut down as planned"} {
		if !strings.Contains(got, want) {
			t.Errorf("events --follow lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, " failed ") {
		t.Errorf("the cluster's planned end on the timeline as a failure:\n%s", got)
	}
}
