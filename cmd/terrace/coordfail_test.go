package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}

// TestCoordinatorFailover runs three coordinators that form their own etcd
// cluster, SIGKILLs the leading one while two workers train, and checks
// that another takes over and training finishes.
func TestCoordinatorFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs eight processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	http, peers := freePorts(t, 3), freePorts(t, 3)
	var cluster []string
	for i := range 3 {
		cluster = append(cluster, fmt.Sprintf("c%d=http://%s", i, peers[i]))
	}
	coords := make([]*exec.Cmd, 3)
	outs := make([]*lineWatcher, 3)
	for i := range 3 {
		w := &lineWatcher{want: "listening on", seen: make(chan struct{})}
		cmd := exec.CommandContext(ctx, terrace(t), "coordinator", "--id", fmt.Sprintf("c%d", i), "--listen", http[i],
			"--etcd-cluster", strings.Join(cluster, ","), "--etcd-peer", peers[i], "--etcd-dir", filepath.Join(dir, fmt.Sprintf("etcd%d", i)),
			"--servers", "2", "--workers", "2", "--replication", "2", "--log-level", "info")
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		coords[i], outs[i] = cmd, w
	}
	leader := waitAny(ctx, t, outs)
	all := strings.Join(http, ",")
	for i := range 2 {
		_, so := start(t, ctx, "server", "--coordinator", all, "--id", fmt.Sprintf("s%d", i), "--log-level", "warn")
		go drain(so)
	}
	workers := make([]*exec.Cmd, 2)
	wouts := make([]*lineWatcher, 2)
	for i := range 2 {
		w := &lineWatcher{want: "pass  3/", seen: make(chan struct{})}
		cmd := exec.CommandContext(ctx, terrace(t), "worker", "--coordinator", all, "--id", fmt.Sprintf("w%d", i),
			"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"), "--epochs", "40", "--log-level", "warn",
			"--report", filepath.Join(dir, fmt.Sprintf("w%d.json", i)))
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		workers[i], wouts[i] = cmd, w
	}
	waitAny(ctx, t, wouts)
	killed := time.Now()
	if err := coords[leader].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var rest []*lineWatcher
	for i, w := range outs {
		if i != leader {
			w.mu.Lock()
			w.buf.Reset()
			w.once = syncOnce()
			w.seen = make(chan struct{})
			w.mu.Unlock()
			rest = append(rest, w)
		}
	}
	waitAny(ctx, t, rest)
	takeover := time.Since(killed)
	for i, w := range workers {
		if err := w.Wait(); err != nil {
			for j, o := range outs {
				t.Logf("coordinator %d (leader %v):\n%s", j, j == leader, o)
			}
			t.Fatalf("worker %d: %v\n%s", i, err, wouts[i])
		}
	}
	if takeover > 30*time.Second {
		t.Errorf("took %v for another coordinator to lead", takeover)
	}
	t.Logf("coordinator SIGKILLed; another led and listened %v later; both workers finished", takeover)
}

// waitAny returns the index of the first watcher to see its line.
func waitAny(ctx context.Context, t *testing.T, ws []*lineWatcher) int {
	t.Helper()
	found := make(chan int, len(ws))
	for i, w := range ws {
		go func() {
			select {
			case <-w.seen:
				found <- i
			case <-ctx.Done():
			}
		}()
	}
	select {
	case i := <-found:
		return i
	case <-ctx.Done():
		var b strings.Builder
		for _, w := range ws {
			b.WriteString(w.String())
		}
		t.Fatalf("timed out waiting:\n%s", b.String())
	}
	return -1
}

// TestStoppedReplicaSaysWhoGoesOn: one of three coordinators that form
// their own etcd cluster, SIGTERMed mid-job, said to start it again for
// the cluster to go on (or, without --etcd-dir, that its state was gone)
// while another had already taken over; it says the others go on.
func TestStoppedReplicaSaysWhoGoesOn(t *testing.T) {
	const members = "c0=http://h0:2380,c1=http://h1:2380,c2=http://h2:2380"
	for _, dir := range []string{"/var/lib/terrace", ""} {
		got := whereStateIs(false, "", dir, members)
		if !strings.Contains(got, "the other coordinators of --etcd-cluster hold its state") || !strings.Contains(got, "2 of the 3") {
			t.Errorf("--etcd-dir %q: %q, want the other coordinators named, 2 of the 3", dir, got)
		}
	}
	if got := whereStateIs(false, "", "/var/lib/terrace", ""); !strings.Contains(got, "start the coordinator again") {
		t.Errorf("a lone coordinator: %q", got)
	}
}

// TestStandbySaysSo: a coordinator replica that another leads says that
// it stands by, naming the leader. It printed nothing until it led, and
// could not be told from a start that hung.
func TestStandbySaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	etcd := freePorts(t, 1)[0]
	a, lead := startWatched(t, ctx, "listening on", "coordinator", "--id", "a", "--listen", "127.0.0.1:0", "--etcd-client", etcd,
		"--etcd-dir", t.TempDir())
	t.Cleanup(func() { a.Process.Kill(); a.Wait() })
	lead.await(t, ctx)
	b, standby := startWatched(t, ctx, "terrace coordinator standing by: a leads", "coordinator", "--id", "b", "--listen", "127.0.0.1:0",
		"--etcd", etcd)
	t.Cleanup(func() { b.Process.Kill(); b.Wait() })
	standby.await(t, ctx)
}
