package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestClusterRunsJobsOneAfterAnother is the stay-up cluster of issue 13
// as a user runs it, each node its own process: a coordinator without
// --exit-when-done and two servers run an lr job submitted with terrace
// submit, then an lda job that a worker brings with its own flags once
// the first is done, each with workers of its own; the coordinator says
// when each job is done, and SIGTERMs end every process with 0.
func TestClusterRunsJobsOneAfterAnother(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nine processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	coordCmd, out := start(t, ctx, "coordinator", "--listen", "127.0.0.1:0", "--servers", "2", "--workers", "2", "--in-memory",
		"--checkpoint-dir", dir+"/ck", "--events", dir+"/events.json", "--report", dir+"/report.json")
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(line)
	addr := strings.TrimSuffix(f[slicesIndex(f, "on")+1], ",")
	lines := make(chan string, 100)
	go func() {
		for {
			l, err := out.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- l
		}
	}()
	waitFor := func(what string) {
		t.Helper()
		for l := range lines {
			if strings.Contains(l, what) {
				return
			}
		}
		t.Fatalf("the coordinator ended without saying %q", what)
	}
	var servers []*exec.Cmd
	for i := range 2 {
		s, so := start(t, ctx, "server", "--coordinator", addr, "--id", fmt.Sprintf("s%d", i), "--log-level", "warn")
		go io.Copy(io.Discard, so)
		servers = append(servers, s)
	}
	jobFile := dir + "/lr.yaml"
	job := fmt.Sprintf("app: lr\ntrain: %s\ntest: %s\npasses: 1\n", repoFile("datasets/a9a/a9a.gz"), repoFile("datasets/a9a/a9a.t.gz"))
	if err := os.WriteFile(jobFile, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.CommandContext(ctx, terrace(t), "submit", "--coordinator", addr, jobFile).CombinedOutput(); err != nil || !bytes.Contains(b, []byte("job submitted")) {
		t.Fatalf("submit: %v\n%s", err, b)
	}
	// The same job again is confirmed, not submitted.
	if b, err := exec.CommandContext(ctx, terrace(t), "submit", "--coordinator", addr, jobFile).CombinedOutput(); err != nil || !bytes.Contains(b, []byte("job 1, the same, is already in force")) {
		t.Fatalf("submit again: %v\n%s", err, b)
	}
	runWorkers := func(job int, args ...string) {
		t.Helper()
		var ws []*exec.Cmd
		for i := range 2 {
			w, wo := start(t, ctx, append([]string{"worker", "--coordinator", addr, "--id", fmt.Sprintf("w%d", i)}, args...)...)
			go io.Copy(io.Discard, wo)
			ws = append(ws, w)
		}
		for _, w := range ws {
			if err := w.Wait(); err != nil {
				t.Fatalf("job %d: worker: %v", job, err)
			}
		}
		waitFor(fmt.Sprintf("job %d done", job))
	}
	runWorkers(1)
	waitFor("ready for job 2")
	first, _ := jobFiles(t, dir)
	checkpointDoneJob(ctx, t, addr, dir+"/ck")
	// A worker with no job flags after the job says the job is done, not
	// that there is none, waits for the next, and at its join timeout
	// says that no next job came.
	late, err := exec.CommandContext(ctx, terrace(t), "worker", "--coordinator", addr, "--join-timeout", "2s", "--log-level", "warn").CombinedOutput()
	if err == nil || !strings.Contains(string(late), "job 1 is done; waiting for the next") || !strings.Contains(string(late), "job 1 is done and no next one was submitted") {
		t.Fatalf("a worker with no job flags after job 1: %v\n%s", err, late)
	}
	runWorkers(2, "--app", "lda", "--train", repoFile("datasets/kos/doc_word_count.tsv.gz"), "--passes", "1")
	// Each job's --events and history are its own, as its --report's
	// passes are: the second job's held the first's too, and terrace plot
	// drew the first job's events against the second's passes.
	waitFor("ready for job 3")
	second, history := jobFiles(t, dir)
	end := first[len(first)-1]
	if len(second) == 0 || second[0].Seq <= end.Seq || len(history) == 0 || !history[0].Time.After(end.Time) {
		t.Fatalf("job 2's events from %+v and samples from %+v; want them after job 1's last event %+v", second[:min(1, len(second))], history[:min(1, len(history))], end)
	}
	// A job no worker has started is replaced by another, and submit
	// says so (it said "job submitted" as of a first job).
	if b, err := exec.CommandContext(ctx, terrace(t), "submit", "--coordinator", addr, jobFile).CombinedOutput(); err != nil || !bytes.Contains(b, []byte("job submitted")) {
		t.Fatalf("submit job 3: %v\n%s", err, b)
	}
	other := dir + "/lr2.yaml"
	if err := os.WriteFile(other, []byte(strings.Replace(job, "passes: 1", "passes: 2", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.CommandContext(ctx, terrace(t), "submit", "--coordinator", addr, other).CombinedOutput(); err != nil || !bytes.Contains(b, []byte("job 4 submitted to "+addr+", replacing job 3 (lr on ")) {
		t.Fatalf("submit a job over one never started: %v\n%s", err, b)
	}
	for _, s := range servers {
		s.Process.Signal(syscall.SIGTERM)
		if err := s.Wait(); err != nil {
			t.Errorf("server after SIGTERM: %v", err)
		}
	}
	coordCmd.Process.Signal(syscall.SIGTERM)
	if err := coordCmd.Wait(); err != nil {
		t.Errorf("coordinator after SIGTERM: %v", err)
	}
}

// jobFiles reads the coordinator's --events and --report's history in dir.
func jobFiles(t *testing.T, dir string) ([]api.Event, []api.Sample) {
	t.Helper()
	var events []api.Event
	var rep struct{ History []api.Sample }
	for name, v := range map[string]any{"events.json": &events, "report.json": &rep} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if len(events) == 0 {
		t.Fatal("no events written")
	}
	return events, rep.History
}

// checkpointDoneJob takes a checkpoint of a finished job with terrace
// checkpoint --wait, which must begin at once (no pass boundary is left)
// and report the commit that it finds on disk.
func checkpointDoneJob(ctx context.Context, t *testing.T, addr, dir string) {
	t.Helper()
	b, err := exec.CommandContext(ctx, terrace(t), "checkpoint", "--coordinator", addr, "--wait", "--json", "--timeout", "1m").Output()
	if err != nil {
		t.Fatalf("checkpoint --wait: %v\n%s", err, b)
	}
	var res checkpointResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("checkpoint --wait --json printed %q: %v", b, err)
	}
	if res.Seq != 1 || res.Pass != 0 || res.PassesDone != 1 || res.Dir != dir {
		t.Errorf("checkpoint --wait reported %+v, want checkpoint 1 after pass 0 (1 pass done) in %s", res, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "commit-0000000001")); err != nil {
		t.Errorf("checkpoint --wait reported a commit that is not on disk: %v", err)
	}
}

// TestWorkerWithoutJobWaits: a worker started with no job flags on a
// cluster with no job waits for one instead of submitting the defaults
// (which raced the worker started beside it with the job's flags), then
// trains the job the next worker brings; alone, it gives up at its join
// timeout and says why.
func TestWorkerWithoutJobWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs four processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	coordCmd, out := start(t, ctx, "coordinator", "--listen", "127.0.0.1:0", "--servers", "1", "--replication", "1",
		"--workers", "2", "--in-memory", "--exit-when-done")
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(line)
	addr := strings.TrimSuffix(f[slicesIndex(f, "on")+1], ",")
	go io.Copy(io.Discard, out)

	lone, err := exec.CommandContext(ctx, terrace(t), "worker", "--coordinator", addr, "--join-timeout", "1s").CombinedOutput()
	if err == nil || !strings.Contains(string(lone), "none was submitted") {
		t.Fatalf("a worker with no job flags and no job: %v\n%s", err, lone)
	}

	s, so := start(t, ctx, "server", "--coordinator", addr, "--id", "s0", "--log-level", "warn")
	go io.Copy(io.Discard, so)
	waiter, wo := start(t, ctx, "worker", "--coordinator", addr, "--id", "w1")
	if l, err := wo.ReadString('\n'); err != nil || !strings.Contains(l, "waiting for one") {
		t.Fatalf("the worker with no job flags said %q, %v; want it to wait for a job", l, err)
	}
	// The pipe stays open until the test's cleanup: look for the line.
	trains := make(chan string, 1)
	go func() {
		for {
			l, err := wo.ReadString('\n')
			if err != nil {
				return
			}
			if strings.Contains(l, "terrace worker: rank") {
				trains <- l
				io.Copy(io.Discard, wo) // a pipe not read blocks its writer
				return
			}
		}
	}()
	bringer, bo := start(t, ctx, "worker", "--coordinator", addr, "--id", "w0",
		"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"), "--passes", "2")
	go io.Copy(io.Discard, bo)
	for _, c := range []*exec.Cmd{bringer, waiter, s, coordCmd} {
		if err := c.Wait(); err != nil {
			t.Fatalf("%v: %v", c.Args[1:3], err)
		}
	}
	select {
	case l := <-trains:
		if !strings.Contains(l, "training lr on "+repoFile("datasets/a9a/a9a.gz")+", 2 passes") {
			t.Errorf("the waiting worker trained something else: %s", l)
		}
	case <-ctx.Done():
		t.Error("the waiting worker exited 0 without saying what it trained")
	}
}

// TestCoordinatorRestartedBetweenJobs: a coordinator started again on its
// --etcd-dir after its job was done waits for the next job, and tells that
// one's end as its own. It waited for the done job's end, and told the next
// one's as the done one's ("job 1 done: 2 pass(es)", "ready for job 2",
// "job 2 done", "ready for job 3"), writing its report twice; and its
// first line said it was "waiting for 1 server(s) and 1 worker(s)".
func TestCoordinatorRestartedBetweenJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs six processes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	coordArgs := []string{"coordinator", "--listen", "127.0.0.1:0", "--servers", "1", "--workers", "1", "--replication", "1",
		"--etcd-dir", filepath.Join(dir, "etcd")}
	c1, co1 := startWatched(t, ctx, "ready for job 2", coordArgs...)
	defer func() { c1.Process.Kill(); c1.Wait() }()
	addr := coordinatorAddr(t, ctx, co1)
	s, so := start(t, ctx, "server", "--coordinator", addr, "--log-level", "warn")
	go io.Copy(io.Discard, so)
	defer func() { s.Process.Kill(); s.Wait() }()
	data := []string{"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz")}
	if b, err := exec.CommandContext(ctx, terrace(t), append([]string{"worker", "--coordinator", addr, "--passes", "1"}, data...)...).CombinedOutput(); err != nil {
		t.Fatalf("job 1's worker: %v\n%s", err, b)
	}
	co1.await(t, ctx)
	c1.Process.Signal(syscall.SIGTERM)
	c1.Wait()

	c2, co2 := startWatched(t, ctx, "job 2 done", append(coordArgs[:2:2], append([]string{addr}, coordArgs[3:]...)...)...)
	defer func() { c2.Process.Kill(); c2.Wait() }()
	if b, err := exec.CommandContext(ctx, terrace(t), append([]string{"worker", "--coordinator", addr, "--passes", "2", "--join-timeout", "1m"}, data...)...).CombinedOutput(); err != nil {
		t.Fatalf("job 2's worker: %v\n%s", err, b)
	}
	co2.await(t, ctx)
	out := co2.String()
	if !strings.Contains(out, "from its saved state: job 1 was done before this coordinator led; ready for job 2") || strings.Contains(out, "job 1 done") ||
		strings.Contains(out, "waiting for") ||
		!strings.Contains(out, "job 2 done: 2 pass(es) trained") {
		t.Fatalf("a coordinator started again after job 1, through job 2:\n%s", out)
	}
}

// TestCoordinatorStoppedBeforeAJob: a coordinator stopped before any job
// was submitted says so. It said "stopped during job 1, 0 pass(es) done"
// of a job nobody had submitted.
func TestCoordinatorStoppedBeforeAJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, w := startWatched(t, ctx, "listening on", "coordinator", "--listen", "127.0.0.1:0", "--in-memory")
	defer func() { c.Process.Kill(); c.Wait() }()
	w.await(t, ctx)
	c.Process.Signal(syscall.SIGTERM)
	c.Wait()
	if out := w.String(); !strings.Contains(out, "stopped before a job was submitted") || strings.Contains(out, "during job") {
		t.Fatalf("a coordinator stopped before any job said:\n%s", out)
	}
}
