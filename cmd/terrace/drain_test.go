package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
)

// lineWatcher copies a process's output and signals when a line contains want.
type lineWatcher struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *lineWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startWatched starts terrace with args, its output to a lineWatcher
// waiting for want.
func startWatched(t *testing.T, ctx context.Context, want string, args ...string) (*exec.Cmd, *lineWatcher) {
	t.Helper()
	w := &lineWatcher{want: want, seen: make(chan struct{})}
	cmd := exec.CommandContext(ctx, terrace(t), args...)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, w
}

// await waits until w has seen its line, and fails the test with what
// the process said if ctx ends first.
func (w *lineWatcher) await(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-w.seen:
	case <-ctx.Done():
		t.Fatalf("never said %q:\n%s", w.want, w)
	}
}

// startCoordinator starts a coordinator on any loopback port with args,
// discards its output after the first line, and returns its address.
func startCoordinator(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	_, out := start(t, ctx, append([]string{"coordinator", "--listen", "127.0.0.1:0"}, args...)...)
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(line)
	go drain(out)
	return strings.TrimSuffix(f[slicesIndex(f, "on")+1], ",")
}

// TestServerInterruptSaysSo: a server given SIGINT (Ctrl-C) leaves at
// once, and says that it did not drain (it exited without a word).
func TestServerInterruptSaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	addr := startCoordinator(t, ctx, "--in-memory", "--servers", "1", "--workers", "1", "--replication", "1")
	s, w := startWatched(t, ctx, "joined", "server", "--coordinator", addr, "--id", "s0")
	w.await(t, ctx)
	if err := s.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	s.Wait()
	if !strings.Contains(w.String(), "terrace: server s0 stopped (interrupt signal received): left at once, not drained") {
		t.Fatalf("a server given SIGINT said:\n%s", w)
	}
}

// TestEventsEmptySaysSo: events on a coordinator with nothing on its
// timeline yet says so (it printed nothing, as if it had not reached it).
func TestEventsEmptySaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	addr := startCoordinator(t, ctx, "--in-memory", "--servers", "1", "--workers", "1")
	if out := events(t, ctx, addr); !strings.Contains(out, "has no events yet") {
		t.Fatalf("events on an empty timeline said %q", out)
	}
}

// TestEventsFollowSaysCoordinatorGone: events --follow whose coordinator
// goes says that it cannot reach it while it retries (30 s of silence,
// then an error, before).
func TestEventsFollowSaysCoordinatorGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, cw := startWatched(t, ctx, "listening on", "coordinator", "--listen", "127.0.0.1:0", "--in-memory", "--servers", "1", "--workers", "1", "--replication", "1")
	cw.await(t, ctx)
	f := strings.Fields(cw.String())
	addr := strings.TrimSuffix(f[slicesIndex(f, "on")+1], ",")
	ev, w := startWatched(t, ctx, "unreachable (", "events", "--coordinator", addr, "--follow")
	defer func() { ev.Process.Kill(); ev.Wait() }()
	c.Process.Kill()
	c.Wait()
	w.await(t, ctx)
	if !strings.Contains(w.String(), "retrying for") {
		t.Fatalf("events --follow after its coordinator went:\n%s", w)
	}
}

// TestWorkerDrainsOnSIGTERM sends SIGTERM to one of two workers once
// training is under way: it must record its progress, return its leases and
// exit 0, and the other worker must train everything left.
func TestWorkerDrainsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("runs five processes")
	}
	trainPath, ok := data.SharedPath("ratings/ml-100k/u1.base")
	testPath, ok2 := data.SharedPath("ratings/ml-100k/u1.test")
	if !ok || !ok2 {
		t.Skip("MovieLens 100K not found under ../shared/data/ratings/ml-100k")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	addr := startCoordinator(t, ctx, "--servers", "2", "--workers", "2", "--replication", "2")
	for i := range 2 {
		_, so := start(t, ctx, "server", "--coordinator", addr, "--id", fmt.Sprintf("s%d", i), "--log-level", "warn")
		go drain(so)
	}
	var cmds []*exec.Cmd
	var outs []*lineWatcher
	for i := range 2 {
		cmd, w := startWatched(t, ctx, "pass  1/", "worker", "--coordinator", addr, "--id", fmt.Sprintf("w%d", i),
			"--app", "mf", "--train", trainPath, "--test", testPath, "--epochs", "4", "--log-level", "warn",
			"--report", filepath.Join(dir, fmt.Sprintf("w%d.json", i)))
		cmds, outs = append(cmds, cmd), append(outs, w)
	}
	// Rank 0 prints the pass lines; drain the other one after the first.
	var rank0 int
	select {
	case <-outs[0].seen:
		rank0 = 0
	case <-outs[1].seen:
		rank0 = 1
	case <-ctx.Done():
		t.Fatal("no pass finished")
	}
	other := 1 - rank0
	if err := cmds[other].Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmds[other].Wait(); err != nil {
		t.Fatalf("drained worker: %v\n%s", err, outs[other])
	}
	if !strings.Contains(outs[other].String(), "drained") {
		t.Errorf("drained worker did not say so:\n%s", outs[other])
	}
	// Should the remaining worker hang (it did once, under a loaded full
	// suite, and never since), its goroutine stacks say where.
	dump := time.AfterFunc(150*time.Second, func() { cmds[rank0].Process.Signal(syscall.SIGQUIT) })
	defer dump.Stop()
	if err := cmds[rank0].Wait(); err != nil {
		t.Fatalf("remaining worker: %v\n%s", err, outs[rank0])
	}
	var rep struct {
		Examples int64   `json:"examples"`
		TestRMSE float64 `json:"test_rmse"`
	}
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("w%d.json", rank0)))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	// 80,000 ratings a epoch; alone for three of four epochs, the remaining
	// worker trains well over half of them.
	if rep.Examples <= 4*80000/2 {
		t.Errorf("remaining worker trained %d examples; the drained worker's partitions were not taken over", rep.Examples)
	}
	if rep.TestRMSE == 0 || rep.TestRMSE > 1.0 {
		t.Errorf("test RMSE %v after a drain", rep.TestRMSE)
	}
	t.Logf("remaining worker trained %d examples, test RMSE %.4f", rep.Examples, rep.TestRMSE)
}

func syncOnce() sync.Once { return sync.Once{} }

func drain(r *bufio.Reader) {
	for {
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
	}
}

// TestLastServerServesOnAfterSIGTERM: the last server on the ring cannot
// drain (its slots would have nowhere to go), so on SIGTERM it serves on
// until its notice's deadline, the worker still training against it, and
// then exits 1 saying its slots left with it.
func TestLastServerServesOnAfterSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr := startCoordinator(t, ctx, "--servers", "1", "--workers", "1", "--replication", "1")
	server, srv := startWatched(t, ctx, "cannot drain", "server", "--coordinator", addr, "--id", "s0", "--grace", "3s", "--log-level", "warn")
	worker, wk := startWatched(t, ctx, "pass  1/", "worker", "--coordinator", addr, "--id", "w0",
		"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"), "--epochs", "1000", "--log-level", "warn")
	t.Cleanup(func() { worker.Process.Kill(); worker.Wait() })
	wk.await(t, ctx) // training started
	if err := server.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	srv.await(t, ctx)
	// The worker goes on training while the server serves on.
	passes := strings.Count(wk.String(), "pass ")
	err := server.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(srv.String(), "left at its notice's deadline") {
		t.Fatalf("server exit %v, want 1 and a word that its slots left with it:\n%s", err, srv)
	}
	if after := strings.Count(wk.String(), "pass "); after <= passes {
		t.Errorf("the worker trained no pass while the last server served on after SIGTERM (%d passes before, %d after):\n%s", passes, after, wk)
	}
}

// TestLastServerWithoutTablesLeavesAtOnce: a forming cluster's only
// server, SIGTERMed before any job made a table, holds nothing: it exits
// 0 at once instead of serving on to its notice's deadline and exiting 1
// saying its slots left with it.
func TestLastServerWithoutTablesLeavesAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr := startCoordinator(t, ctx, "--servers", "1", "--workers", "1", "--replication", "1")
	server, srv := startWatched(t, ctx, "joined", "server", "--coordinator", addr, "--id", "s0", "--grace", "1m", "--log-level", "info")
	srv.await(t, ctx)
	if err := server.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := server.Wait(); err != nil || !strings.Contains(srv.String(), "holds no table yet") {
		t.Fatalf("server exit %v, want 0 at once:\n%s", err, srv)
	}
	// A server that joins takes its place, and the job trains. The layout
	// kept the one that left as serving: the new one waited for a copy
	// from it for good, and the worker gave up at its join timeout.
	next, _ := startWatched(t, ctx, "joined", "server", "--coordinator", addr, "--id", "s1", "--log-level", "warn")
	t.Cleanup(func() { next.Process.Kill(); next.Wait() })
	out, err := exec.CommandContext(ctx, terrace(t), "worker", "--coordinator", addr, "--id", "w0", "--join-timeout", "20s", "--log-level", "warn",
		"--train", repoFile(defaultTrain), "--test", repoFile(defaultTest), "--passes", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("a worker after the last server left before any table and another joined: %v\n%s", err, out)
	}
}

// TestSIGTERMBeforeJoining: a server waiting for its coordinator, and a
// worker waiting for the cluster's job, hold nothing: SIGTERM ends them
// at once with exit 0. The server ignored it until its join timeout and
// exited 1; the worker died of it (exit 143) without a word.
func TestSIGTERMBeforeJoining(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr := startCoordinator(t, ctx, "--servers", "1", "--workers", "1", "--replication", "1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"server waiting for its coordinator", "coordinator unreachable; retrying", []string{"server", "--coordinator", nobody, "--join-timeout", "1m"}},
		{"worker waiting for a job", "no job on the cluster yet", []string{"worker", "--coordinator", addr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, w := startWatched(t, ctx, tc.want, append(tc.args, "--log-level", "warn")...)
			w.await(t, ctx)
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil || !strings.Contains(w.String(), "drained; exiting") {
				t.Fatalf("exit %v, want 0 at once:\n%s", err, w)
			}
		})
	}
}

// TestLastServerCheckpointsOnNotice: the last server on the ring,
// SIGTERMed (its notice) while the job trains with a checkpoint
// directory, cannot drain, so the coordinator takes a checkpoint inside
// the pass at once; it is committed before the server's deadline, and
// names the pass in progress (or none, when the notice fell between two
// passes).
func TestLastServerCheckpointsOnNotice(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	addr := startCoordinator(t, ctx, "--servers", "1", "--workers", "1", "--replication", "1", "--checkpoint-dir", dir)
	server, srv := startWatched(t, ctx, "cannot drain", "server", "--coordinator", addr, "--id", "s0", "--grace", "3s", "--log-level", "warn")
	worker, wk := startWatched(t, ctx, "pass  1/", "worker", "--coordinator", addr, "--id", "w0",
		"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"), "--epochs", "1000", "--log-level", "warn")
	t.Cleanup(func() { worker.Process.Kill(); worker.Wait() })
	wk.await(t, ctx) // training started
	if err := server.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	srv.await(t, ctx)
	server.Wait()
	ck, err := coord.LatestCommitted(ctx, dir)
	if err != nil {
		t.Fatalf("no checkpoint committed after the last server's notice: %v\n%s", err, srv)
	}
	if ck.InPass == nil {
		// The notice fell between two passes (under load, a pass of
		// lr on a9a is about as long as the gap between passes): the
		// checkpoint taken at once is then a boundary's.
		t.Logf("checkpoint %d at the boundary after pass %d", ck.Seq, ck.Pass)
		return
	}
	if ck.InPass.Pass != ck.Pass+1 || len(ck.InPass.Pieces) == 0 {
		t.Fatalf("checkpoint %d after pass %d names the pass in progress wrongly: %+v", ck.Seq, ck.Pass, ck.InPass)
	}
	t.Logf("checkpoint %d inside pass %d (counted from 0): %+v", ck.Seq, ck.InPass.Pass, ck.InPass.Pieces)
}

// TestLastServerNoticedDuringJob: the last server on the ring, SIGTERMed
// during the job, serves out its notice and, the job having ended
// meanwhile, leaves at the deadline as the last server after a job does:
// exit 0, and the status says it left with the model. It exited 1
// unannounced, and the status showed it serving every slot for good.
func TestLastServerNoticedDuringJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	addr := startCoordinator(t, ctx, "--in-memory", "--servers", "1", "--workers", "1", "--replication", "1")
	s, sw := startWatched(t, ctx, "cannot drain", "server", "--coordinator", addr, "--id", "s0", "--grace", "15s")
	defer func() { s.Process.Kill(); s.Wait() }()
	w, ww := startWatched(t, ctx, " 1/10 ", "worker", "--coordinator", addr, "--passes", "10",
		"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"))
	defer func() { w.Process.Kill(); w.Wait() }()
	ww.await(t, ctx)
	s.Process.Signal(syscall.SIGTERM)
	sw.await(t, ctx)
	if err := w.Wait(); err != nil {
		t.Fatalf("the worker: %v\n%s", err, ww)
	}
	if err := s.Wait(); err != nil {
		t.Fatalf("the last server, noticed during the job, at its deadline after the job: %v\n%s", err, sw)
	}
	st, err := api.NewClient(addr, nil).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.ID == "s0" && n.State != "left" {
			t.Fatalf("the last server, gone after the job: %q, %q", n.State, n.Holds)
		}
	}
}

// TestWorkerHoldsItsPorts: a worker's fixed --metrics-listen port is its
// own from its start, while it waits for its coordinator, and it serves
// its metrics there once it trains. The port was tried and let go before
// the worker submitted its job, so a process that took it in between
// failed the worker after the submission.
func TestWorkerHoldsItsPorts(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	coordAddr, metrics := free(), free()
	waiting := &lineWatcher{want: "coordinator unreachable", seen: make(chan struct{})}
	serving := &lineWatcher{want: "metrics on http://" + metrics, seen: make(chan struct{})}
	w := exec.CommandContext(ctx, terrace(t), "worker", "--coordinator", coordAddr, "--metrics-listen", metrics,
		"--passes", "1", "--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"))
	w.Stdout = io.MultiWriter(waiting, serving)
	w.Stderr = w.Stdout
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { w.Process.Kill(); w.Wait() }()
	waiting.await(t, ctx)
	if ln, err := net.Listen("tcp", metrics); err == nil {
		ln.Close()
		t.Fatalf("another process could listen on the --metrics-listen %s of a worker waiting for its coordinator", metrics)
	}
	_, out := start(t, ctx, "coordinator", "--listen", coordAddr, "--in-memory", "--servers", "1", "--workers", "1", "--replication", "1")
	go drain(out)
	_, out = start(t, ctx, "server", "--coordinator", coordAddr, "--id", "s0")
	go drain(out)
	serving.await(t, ctx)
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatalf("the worker's metrics on its held port: %v\n%s", err, serving)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the worker's metrics on its held port: %s", resp.Status)
	}
}

// TestWorkerPortInUseSubmitsNothing: a worker whose --metrics-listen or
// --peer-addr port is taken exits 1 naming the flag before it submits its
// flags' job. It failed only after, and the job it left, which no worker
// trained, refused the next worker's flags ("the cluster runs another
// job: --passes 3, but the cluster's job has passes 10").
func TestWorkerPortInUseSubmitsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	addr := startCoordinator(t, ctx, "--in-memory", "--servers", "1", "--workers", "1", "--replication", "1")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, flags := range [][]string{{"--metrics-listen", taken.Addr().String()}, {"--reassign", "--peer-addr", taken.Addr().String()}} {
		args := append([]string{"worker", "--coordinator", addr, "--passes", "3",
			"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz")}, flags...)
		out, err := exec.CommandContext(ctx, terrace(t), args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), flags[len(flags)-2]+" "+taken.Addr().String()) {
			t.Fatalf("worker %v on a port in use: %v\n%s", flags, err, out)
		}
		st, err := api.NewClient(addr, nil).JobStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Job != nil {
			t.Fatalf("worker %v on a port in use submitted its job: %+v", flags, *st.Job)
		}
	}
}
