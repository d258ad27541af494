package meta

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// initialCluster names n members m0..m(n-1) at peers.
func initialCluster(peers []string) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = fmt.Sprintf("m%d=http://%s", i, p)
	}
	return strings.Join(parts, ",")
}

// writeUntil retries a write (a new key each time, so that no attempt is
// ambiguous) until one succeeds, and returns how long that took.
func writeUntil(t *testing.T, s *Store, name string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(s.key("probe", fmt.Sprintf("%s-%d", name, i))), "=", 0)).
			Then(clientv3.OpPut(s.key("probe", fmt.Sprintf("%s-%d", name, i)), "x")).Commit()
		cancel()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("no write succeeded within %v: %v", within, err)
		}
	}
}

// Three coordinators each embed one member of one cluster.
func TestThreeEmbeddedMembers(t *testing.T) {
	addrs := freeAddrs(t, 6)
	clients, peers := addrs[:3], addrs[3:]
	ic := initialCluster(peers)
	members := make([]*Embedded, 3)
	errs := make([]error, 3)
	ctx := ctxT(t, 30*time.Second)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 3 {
		// Each waits for a quorum, so they must start together.
		wg.Go(func() {
			members[i], errs[i] = StartEmbedded(ctx, EmbedConfig{
				Name: fmt.Sprintf("m%d", i), Dir: t.TempDir(),
				ClientAddr: clients[i], PeerAddr: peers[i], InitialCluster: ic,
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		defer members[i].Close()
	}
	t.Logf("three embedded members ready in %v", time.Since(start))

	var all []string
	for _, m := range members {
		all = append(all, m.Endpoints()...)
	}
	s, err := Open(ctx, all, "/c")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.cli.Put(ctx, s.key("probe"), "w"); err != nil {
		t.Fatal(err)
	}
	// Every member serves the key, through its own endpoint only.
	for i, m := range members {
		one, err := Open(ctx, m.Endpoints(), "/c")
		if err != nil {
			t.Fatal(err)
		}
		got, err := one.cli.Get(ctx, s.key("probe"))
		one.Close()
		if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "w" {
			t.Fatalf("member %d holds %v, %v; want w", i, got, err)
		}
	}

	// Stop the raft leader's coordinator; the other two carry on.
	leader := -1
	for i, m := range members {
		if m.etcd.Server.Leader() == m.etcd.Server.MemberID() {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no member is the raft leader")
	}
	_, rev, err := s.Members(ctx, "server")
	if err != nil {
		t.Fatal(err)
	}
	// The watch's stream may be on the member that goes away; it resumes
	// on another.
	events := s.WatchMembers(ctx, "server", rev)
	members[leader].Close()
	stall := writeUntil(t, s, "after-close", 10*time.Second)
	t.Logf("after closing the leader member m%d, a write succeeded in %v", leader, stall)
	m, err := s.Register(ctx, "server", "s1", NodeInfo{Addr: "a"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Leave(ctx)
	select {
	case ev := <-events:
		if ev.ID != "s1" || ev.Deleted {
			t.Errorf("watched %+v, want s1 joining", ev)
		}
	case <-ctx.Done():
		t.Fatal("watch did not survive the loss of a member")
	}
	for i, m := range members {
		if i != leader && m.etcd.Server.Leader() == m.etcd.Server.MemberID() {
			leader = -1
		}
	}
	if leader != -1 {
		t.Error("no remaining member became raft leader")
	}
}

// etcdBinary finds Debian's etcd-server.
func etcdBinary(t *testing.T) string {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd"
	}
	t.Skip("etcd-server not installed: apt-get install etcd-server")
	return ""
}

// An external three-member cluster keeps serving when its leader is killed.
func TestExternalClusterLeaderKill(t *testing.T) {
	bin := etcdBinary(t)
	addrs := freeAddrs(t, 6)
	clients, peers := addrs[:3], addrs[3:]
	ic := initialCluster(peers)
	dir := t.TempDir()
	procs := make([]*exec.Cmd, 3)
	logs := make([]string, 3)
	for i := range 3 {
		logs[i] = filepath.Join(dir, fmt.Sprintf("m%d.log", i))
		f, err := os.Create(logs[i])
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin,
			"--name", fmt.Sprintf("m%d", i),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls", "http://"+clients[i],
			"--advertise-client-urls", "http://"+clients[i],
			"--listen-peer-urls", "http://"+peers[i],
			"--initial-advertise-peer-urls", "http://"+peers[i],
			"--initial-cluster", ic,
			"--initial-cluster-state", "new",
			"--initial-cluster-token", "meta-test",
			// The embedded defaults, so that 1 s leases are possible.
			"--heartbeat-interval", fmt.Sprint(DefaultTickMs),
			"--election-timeout", fmt.Sprint(DefaultElectionMs),
			"--logger", "zap", "--log-level", "warn",
		)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		procs[i] = cmd
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", l, b)
			}
		}
	})

	ctx := ctxT(t, 40*time.Second)
	var s *Store
	start := time.Now()
	eventually(t, 15*time.Second, "external cluster serving", func() bool {
		var err error
		s, err = Open(ctx, clients, "/ext")
		return err == nil
	})
	defer s.Close()
	t.Logf("external cluster (%s) serving after %v", bin, time.Since(start))

	// A member with a lease that spans the leader change, and one with the
	// shortest lease, to see whether a leader change costs it.
	long, err := s.Register(ctx, "server", "long", NodeInfo{Addr: "a"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	short, err := s.Register(ctx, "server", "short", NodeInfo{Addr: "b"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Put(ctx, s.key("before"), "x"); err != nil {
		t.Fatal(err)
	}
	// A coordinator leading through the kill, on a 1 s session.
	before, err := s.Campaign(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}

	leaderID, killed := uint64(0), -1
	for i, ep := range clients {
		st, err := s.cli.Status(ctx, ep)
		if err != nil {
			t.Fatal(err)
		}
		leaderID = st.Leader
		if st.Header.MemberId == st.Leader {
			killed = i
		}
	}
	if killed < 0 {
		t.Fatal("no member reports itself leader")
	}
	if err := procs[killed].Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	stall := writeUntil(t, s, "after-kill", 10*time.Second)
	t.Logf("after SIGKILL of leader m%d, a write succeeded in %v", killed, stall)

	for i, ep := range clients {
		if i == killed {
			continue
		}
		st, err := s.cli.Status(ctx, ep)
		if err != nil {
			t.Fatal(err)
		}
		if st.Leader == 0 || st.Leader == leaderID {
			t.Errorf("m%d reports leader %x after m%d (%x) was killed", i, st.Leader, killed, leaderID)
		}
	}
	got, _, err := s.Members(ctx, "server")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["long"]; !ok {
		t.Error("member with a 5 s lease lost in the leader change")
	}
	select {
	case <-long.Lost():
		t.Error("5 s lease reported lost")
	default:
	}
	select {
	case <-short.Lost():
		t.Logf("1 s lease was lost in the leader change")
	default:
		_, ok := got["short"]
		t.Logf("1 s lease survived the leader change (registered: %v)", ok)
	}
	select {
	case <-before.Lost():
		t.Logf("the coordinator's 1 s leadership was lost in the leader change")
	default:
		t.Logf("the coordinator's 1 s leadership survived the leader change")
	}
	// Leadership moves between coordinators on the two survivors.
	before.Resign(ctx)
	after, err := s.Campaign(ctx, "after")
	if err != nil {
		t.Fatal(err)
	}
	if id, err := s.Leader(ctx); err != nil || id != "after" {
		t.Errorf("leader = %q, %v; want after", id, err)
	}
	after.Resign(ctx)
}

// One member of a cluster of three started alone never becomes ready (no
// quorum): it says so while it waits, and a cancel (the coordinator's
// SIGTERM or Ctrl-C) ends the wait. It hung in etcd's Close before,
// whose listeners wait for the member to be ready.
func TestMemberWithoutQuorumStops(t *testing.T) {
	addrs := freeAddrs(t, 4)
	ic := initialCluster(addrs[1:])
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	waited := make(chan time.Duration, 16)
	done := make(chan error, 1)
	go func() {
		_, err := StartEmbedded(ctx, EmbedConfig{
			Name: "m0", Dir: t.TempDir(), ClientAddr: addrs[0], PeerAddr: addrs[1], InitialCluster: ic,
			WaitingEvery: 100 * time.Millisecond,
			Waiting: func(d time.Duration) {
				select {
				case waited <- d:
				default:
				}
			},
		})
		done <- err
	}()
	select {
	case <-waited:
	case err := <-done:
		t.Fatalf("a member without a quorum returned %v, want it to wait", err)
	case <-time.After(20 * time.Second):
		t.Fatal("a member without a quorum did not say it was waiting")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled while waiting for a quorum: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a member waiting for a quorum did not stop when cancelled")
	}
}
