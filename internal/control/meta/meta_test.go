package meta

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

func TestEmbeddedStartAndRestart(t *testing.T) {
	t.Logf("shared embedded member started in %v", sharedStarted)
	dir := t.TempDir()
	start := time.Now()
	e, err := StartEmbedded(ctxT(t, 10*time.Second), EmbedConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	startup := time.Since(start)
	t.Logf("fresh embedded member started in %v at %v", startup, e.Endpoints())
	s, err := Open(ctxT(t, 5*time.Second), e.Endpoints(), "/p")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Put(ctxT(t, 5*time.Second), s.key("probe"), "w"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	e.Close()

	// The data directory carries the state over to the next start.
	e, err = StartEmbedded(ctxT(t, 10*time.Second), EmbedConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s, err = Open(ctxT(t, 5*time.Second), e.Endpoints(), "/p")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.cli.Get(ctxT(t, 5*time.Second), s.key("probe"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "w" {
		t.Fatalf("after restart the key holds %v, want w", got.Kvs)
	}
}

// TestEmbeddedDirInUse: a second member on a live member's data
// directory is refused (etcd waited for the database's lock for good).
func TestEmbeddedDirInUse(t *testing.T) {
	errc := make(chan error, 1)
	go func() {
		e, err := StartEmbedded(t.Context(), EmbedConfig{Dir: sharedDir})
		if err == nil {
			e.Close()
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrDirInUse) || !strings.Contains(err.Error(), sharedDir) {
			t.Errorf("a second member on a live one's directory: %v, want ErrDirInUse naming it", err)
		}
	case <-time.After(20 * time.Second): // etcd logs "flocked by another process" at 10 s and waits on
		t.Fatal("a second member on a live one's directory still starting: it waits for the lock")
	}
}

// TestEmbeddedDamagedDB: a data directory whose database is truncated or
// overwritten is refused with ErrDataDamaged naming it. etcd panicked in
// a goroutine of its own ("failed to open database"), and the
// coordinator ended in a goroutine dump with exit 2.
func TestEmbeddedDamagedDB(t *testing.T) {
	for name, body := range map[string][]byte{"truncated": make([]byte, 5000), "overwritten": []byte(strings.Repeat("garbage!", 1024))} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			snap := filepath.Join(dir, "member", "snap")
			if err := os.MkdirAll(snap, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(snap, "db"), body, 0o600); err != nil {
				t.Fatal(err)
			}
			e, err := StartEmbedded(ctxT(t, 10*time.Second), EmbedConfig{Dir: dir})
			if err == nil {
				e.Close()
			}
			if !errors.Is(err, ErrDataDamaged) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("a member on a damaged database: %v, want ErrDataDamaged naming %s", err, dir)
			}
		})
	}
}

// TestEmbeddedDamagedPage: a database that opens but holds damaged pages
// is refused the same way. etcd read its keys and panicked with a slice out
// of range in a goroutine of bbolt's, where no recover reaches: the
// coordinator ended in a goroutine dump with exit 2 (and so would this
// test's process).
func TestEmbeddedDamagedPage(t *testing.T) {
	dir := t.TempDir()
	e, err := StartEmbedded(ctxT(t, 10*time.Second), EmbedConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctxT(t, 5*time.Second), e.Endpoints(), "/p")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := s.cli.Put(ctxT(t, 5*time.Second), s.key(fmt.Sprint("k", i)), strings.Repeat("v", 100)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	e.Close()

	// Every page past the two meta pages that holds anything gets garbage
	// after its 16-byte header: its elements' offsets and sizes.
	db := filepath.Join(dir, "member", "snap", "db")
	body, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	rng := rand.New(rand.NewPCG(7, 8))
	damaged := 0
	for p := 2 * page; p+page <= len(body); p += page {
		if bytes.Count(body[p:p+page], []byte{0}) == page {
			continue
		}
		for i := p + 16; i < p+600; i++ {
			body[i] = byte(rng.Uint32())
		}
		damaged++
	}
	if damaged == 0 {
		t.Fatal("the database holds no page past its meta pages")
	}
	if err := os.WriteFile(db, body, 0o600); err != nil {
		t.Fatal(err)
	}
	e, err = StartEmbedded(ctxT(t, 10*time.Second), EmbedConfig{Dir: dir})
	if err == nil {
		e.Close()
	}
	if !errors.Is(err, ErrDataDamaged) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a member on a database with %d damaged pages: %v, want ErrDataDamaged naming %s", damaged, err, dir)
	}
	t.Log(err)
}

func TestEmbeddedConfigErrors(t *testing.T) {
	if _, err := StartEmbedded(t.Context(), EmbedConfig{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no data dir: err = %v, want ErrInvalid", err)
	}
	_, err := StartEmbedded(t.Context(), EmbedConfig{Dir: t.TempDir(), Name: "a", InitialCluster: "a=http://127.0.0.1:1,b=http://127.0.0.1:2"})
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("multi-member with port 0: err = %v, want ErrInvalid", err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	addr := freeAddrs(t, 1)[0] // nothing listens there
	start := time.Now()
	_, err := Open(t.Context(), []string{addr}, "/x")
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	t.Logf("unreachable etcd reported after %v: %v", took, err)
	if took > OpenTimeout+2*time.Second {
		t.Errorf("took %v, want about OpenTimeout (%v)", took, OpenTimeout)
	}
}

func TestRegisterAndLeave(t *testing.T) {
	s := open(t)
	ctx := ctxT(t, 10*time.Second)
	info := NodeInfo{Addr: "127.0.0.1:7000", Labels: map[string]string{"zone": "a"}}
	m, err := s.Register(ctx, "server", "s1", info, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register(ctx, "server", "s1", info, time.Second); !errors.Is(err, ErrMemberExists) {
		t.Errorf("second registration: err = %v, want ErrMemberExists", err)
	}
	if _, err := s.Register(ctx, "server", "a/b", info, time.Second); !errors.Is(err, ErrInvalid) {
		t.Errorf("id with '/': err = %v, want ErrInvalid", err)
	}
	got, _, err := s.Members(ctx, "server")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["s1"].Addr != info.Addr || got["s1"].Labels["zone"] != "a" {
		t.Fatalf("members = %+v, want s1 with %+v", got, info)
	}
	if others, _, _ := s.Members(ctx, "worker"); len(others) != 0 {
		t.Errorf("workers = %+v, want none", others)
	}
	if err := m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	// Revoking is synchronous: the key is gone when Leave returns.
	if got, _, _ := s.Members(ctx, "server"); len(got) != 0 {
		t.Errorf("after Leave members = %+v, want none", got)
	}
	if !closedWithin(m.Lost(), 2*time.Second) {
		t.Error("Lost not closed after Leave")
	}
	if err := m.Leave(ctx); err != nil {
		t.Errorf("second Leave: %v", err)
	}
	// The id is free again.
	m2, err := s.Register(ctx, "server", "s1", info, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m2.Leave(ctx)
}

// A member whose process dies (its client closes without revoking) is
// removed when its lease expires.
func TestLeaseLossOnClientClose(t *testing.T) {
	coord := open(t)
	ctx := ctxT(t, 20*time.Second)
	_, rev, err := coord.Members(ctx, "worker")
	if err != nil {
		t.Fatal(err)
	}
	events := coord.WatchMembers(ctx, "worker", rev)

	dying, err := Open(ctx, shared.Endpoints(), coord.prefix)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second
	m, err := dying.Register(ctx, "worker", "w1", NodeInfo{Addr: "x"}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.ID != "w1" || ev.Deleted {
		t.Fatalf("first event %+v, want w1 joining", ev)
	}

	dying.Close()
	killed := time.Now()
	select {
	case ev := <-events:
		if ev.ID != "w1" || !ev.Deleted || ev.Info.Addr != "x" {
			t.Fatalf("event %+v, want w1 deleted, with the info it registered", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("member still registered 5 s after its client closed")
	}
	detect := time.Since(killed)
	t.Logf("lease loss detected %v after the client closed (TTL %v)", detect, ttl)
	if !closedWithin(m.Lost(), time.Second) {
		t.Error("Lost not closed")
	}
}

func TestEvict(t *testing.T) {
	coord, srv := open(t), open(t)
	ctx := ctxT(t, 10*time.Second)
	// A long TTL, so that only eviction can remove it within the test.
	m, err := srv.Register(ctx, "server", "s1", NodeInfo{Addr: "a"}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := coord.Evict(ctx, "server", "s1"); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := coord.Members(ctx, "server"); len(got) != 0 {
		t.Errorf("after Evict members = %+v, want none", got)
	}
	if !closedWithin(m.Lost(), 3*time.Second) {
		t.Error("evicted member's Lost not closed")
	}
	if err := coord.Evict(ctx, "server", "s1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("evicting an absent member: err = %v, want ErrNotFound", err)
	}
}

// Changes made between a read and the start of a watch are delivered.
func TestWatchFromReadRevision(t *testing.T) {
	s := open(t)
	ctx := ctxT(t, 10*time.Second)
	a, err := s.Register(ctx, "server", "a", NodeInfo{Addr: "1"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got, rev, err := s.Members(ctx, "server")
	if err != nil || len(got) != 1 {
		t.Fatalf("members = %v, %v", got, err)
	}
	// These happen after the read and before the watch exists.
	b, err := s.Register(ctx, "server", "b", NodeInfo{Addr: "2"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Leave(ctx)
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	events := s.WatchMembers(ctx, "server", rev)
	want := []string{"b joined", "a left"}
	for i, w := range want {
		var ev MemberEvent
		select {
		case ev = <-events:
		case <-ctx.Done():
			t.Fatalf("event %d (%s) missing", i, w)
		}
		desc := ev.ID + " joined"
		if ev.Deleted {
			desc = ev.ID + " left"
		}
		if desc != w || ev.Role != "server" || ev.Rev <= rev {
			t.Errorf("event %d = %+v, want %s after revision %d", i, ev, w, rev)
		}
		if !ev.Deleted && ev.Info.Addr != "2" {
			t.Errorf("joined event info %+v", ev.Info)
		}
	}
}

func TestElection(t *testing.T) {
	s1, s2 := open(t), open(t)
	ctx := ctxT(t, 15*time.Second)
	if _, err := s1.Leader(ctx); !errors.Is(err, ErrNotFound) {
		t.Errorf("leader before any campaign: err = %v, want ErrNotFound", err)
	}
	a, err := s1.Campaign(ctx, "coord-a")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *Leadership
		err error
	}
	bc := make(chan result, 1)
	go func() {
		l, err := s2.Campaign(ctx, "coord-b")
		bc <- result{l, err}
	}()
	// b's candidate key appears once its campaign is waiting.
	eventually(t, 5*time.Second, "second candidate", func() bool {
		resp, err := s1.cli.Get(ctx, s1.electionPrefix()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 2
	})
	select {
	case r := <-bc:
		t.Fatalf("second campaigner won while the first leads: %+v", r)
	default:
	}
	if id, err := s2.Leader(ctx); err != nil || id != "coord-a" {
		t.Fatalf("leader = %q, %v; want coord-a", id, err)
	}
	p := Placement{Servers: []ring.Server{{ID: "s1", Addr: "x"}}, VNodes: 8}
	if _, err := s1.PutPlacement(ctx, a, p); err != nil {
		t.Fatalf("leader's write: %v", err)
	}

	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var b *Leadership
	select {
	case r := <-bc:
		if r.err != nil {
			t.Fatal(r.err)
		}
		b = r.l
	case <-ctx.Done():
		t.Fatal("second campaigner not elected after the first resigned")
	}
	if id, err := s1.Leader(ctx); err != nil || id != "coord-b" {
		t.Errorf("leader = %q, %v; want coord-b", id, err)
	}
	if _, err := s1.PutPlacement(ctx, a, p); !errors.Is(err, ErrNotLeader) {
		t.Errorf("deposed leader's write: err = %v, want ErrNotLeader", err)
	}
	if _, err := s2.PutPlacement(ctx, b, p); err != nil {
		t.Errorf("new leader's write: %v", err)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A leader that loses its lease without knowing it (a long pause, a
// partition) is deposed, and its late writes fail.
func TestDeposedLeaderLateWrite(t *testing.T) {
	s1, s2 := open(t), open(t)
	ctx := ctxT(t, 15*time.Second)
	a, err := s1.Campaign(ctx, "coord-a")
	if err != nil {
		t.Fatal(err)
	}
	bc := make(chan *Leadership, 1)
	go func() {
		l, err := s2.Campaign(ctx, "coord-b")
		if err != nil {
			t.Error(err)
		}
		bc <- l
	}()
	// Expire a's lease behind its back, as etcd would after a's renewals
	// stopped arriving.
	if _, err := s2.cli.Revoke(ctx, a.sess.Lease()); err != nil {
		t.Fatal(err)
	}
	b := <-bc
	if b == nil {
		t.FailNow()
	}
	defer b.Resign(ctx)
	if !closedWithin(a.Lost(), 3*time.Second) {
		t.Error("deposed leader's Lost not closed")
	}
	p := Placement{Servers: []ring.Server{{ID: "s1", Addr: "x"}}}
	if _, err := s1.PutPlacement(ctx, a, p); !errors.Is(err, ErrNotLeader) {
		t.Errorf("late write: err = %v, want ErrNotLeader", err)
	}
	if _, _, err := s1.Placement(ctx); !errors.Is(err, ErrNotFound) {
		t.Errorf("placement after refused write: err = %v, want ErrNotFound", err)
	}
}

func TestPlacementEpoch(t *testing.T) {
	s := open(t)
	ctx := ctxT(t, 10*time.Second)
	lead, err := s.Campaign(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Resign(ctx)
	if _, _, err := s.Placement(ctx); !errors.Is(err, ErrNotFound) {
		t.Errorf("placement before any write: err = %v, want ErrNotFound", err)
	}
	p1 := Placement{Servers: []ring.Server{{ID: "s1", Addr: "a"}, {ID: "s2", Addr: "b"}}, VNodes: 16, Replication: 2}
	e1, err := s.PutPlacement(ctx, lead, p1)
	if err != nil {
		t.Fatal(err)
	}
	got, epoch, err := s.Placement(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.cli.Get(ctx, s.placementKey())
	if err != nil {
		t.Fatal(err)
	}
	if epoch != e1 || uint64(raw.Kvs[0].ModRevision) != e1 {
		t.Errorf("epoch read %d, written %d, ModRevision %d: want all equal", epoch, e1, raw.Kvs[0].ModRevision)
	}
	if len(got.Servers) != 2 || got.Servers[1] != p1.Servers[1] || got.VNodes != 16 || got.Replication != 2 {
		t.Errorf("placement = %+v, want %+v", got, p1)
	}

	// Other writes move the revision but not the epoch.
	m, err := s.Register(ctx, "server", "s3", NodeInfo{Addr: "c"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Leave(ctx)
	if _, err := s.cli.Put(ctx, s.key("other"), "x"); err != nil {
		t.Fatal(err)
	}
	if _, epoch, _ := s.Placement(ctx); epoch != e1 {
		t.Errorf("epoch moved to %d without a placement write (was %d)", epoch, e1)
	}

	watch := s.WatchPlacement(ctx, int64(e1))
	p2 := Placement{Servers: append(p1.Servers, ring.Server{ID: "s3", Addr: "c"}), VNodes: 16, Replication: 2}
	e2, err := s.PutPlacement(ctx, lead, p2)
	if err != nil {
		t.Fatal(err)
	}
	if e2 <= e1 {
		t.Errorf("second epoch %d not above first %d", e2, e1)
	}
	select {
	case ev := <-watch:
		if ev.Epoch != e2 || len(ev.Placement.Servers) != 3 {
			t.Errorf("watched %+v, want epoch %d with 3 servers", ev, e2)
		}
	case <-ctx.Done():
		t.Fatal("placement change not watched")
	}

	bad := []Placement{
		{Servers: []ring.Server{{ID: "s1"}, {ID: "s1"}}},
		{Servers: []ring.Server{{ID: "s1"}}, Replication: 2},
		{VNodes: -1},
	}
	for _, p := range bad {
		if _, err := s.PutPlacement(ctx, lead, p); !errors.Is(err, ErrInvalid) {
			t.Errorf("PutPlacement(%+v): err = %v, want ErrInvalid", p, err)
		}
	}
	if _, epoch, _ := s.Placement(ctx); epoch != e2 {
		t.Errorf("refused writes moved the epoch to %d", epoch)
	}
}

func TestWatchEndsWithStore(t *testing.T) {
	s, err := Open(ctxT(t, 5*time.Second), shared.Endpoints(), testPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	events := s.WatchMembers(t.Context(), "server", 0)
	s.Close()
	select {
	case _, ok := <-events:
		if ok {
			t.Error("event from a closed store")
		}
	case <-time.After(5 * time.Second):
		t.Error("watch still open 5 s after its Store closed")
	}
}

// TestForgetState: the saved state, the placement and the partition
// states go, only under the current lead; events stay, and the next
// epoch is still above every earlier one.
func TestForgetState(t *testing.T) {
	s := open(t)
	ctx := ctxT(t, 10*time.Second)
	lead, err := s.Campaign(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Resign(ctx)
	p := &Placement{Servers: []ring.Server{{ID: "s1", Addr: "a"}}}
	e1, err := s.PutSnapshot(ctx, lead, Save{State: []byte(`{"x":1}`), Gen: 1, Parts: map[int][]byte{0: []byte("r")}, Rewrite: true}, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutPartState(ctx, lead, 3, 7, []byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEvents(ctx, lead, []api.Event{{Seq: 1, Kind: api.EventJoin}}, api.EventsKept{}); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetState(ctx, nil); !errors.Is(err, ErrNotLeader) {
		t.Errorf("ForgetState without the lead: err = %v, want ErrNotLeader", err)
	}
	if err := s.ForgetState(ctx, lead); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx); !errors.Is(err, ErrNotFound) {
		t.Errorf("snapshot after ForgetState: err = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Placement(ctx); !errors.Is(err, ErrNotFound) {
		t.Errorf("placement after ForgetState: err = %v, want ErrNotFound", err)
	}
	if _, err := s.PartState(ctx, 3, 7); !errors.Is(err, ErrNotFound) {
		t.Errorf("partition state after ForgetState: err = %v, want ErrNotFound", err)
	}
	if n := countKeys(t, s, s.partsKey()); n != 0 {
		t.Errorf("%d partition records after ForgetState", n)
	}
	if evs, err := s.Events(ctx); err != nil || len(evs) != 1 {
		t.Errorf("events after ForgetState: %v, %v; want the one kept", evs, err)
	}
	e2, err := s.PutSnapshot(ctx, lead, Save{State: []byte(`{"x":2}`)}, p)
	if err != nil {
		t.Fatal(err)
	}
	if e2 <= e1 {
		t.Errorf("epoch %d after ForgetState not above %d before", e2, e1)
	}
}
