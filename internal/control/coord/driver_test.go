package coord

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/dataplane/simnet"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/server"
	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
	"github.com/terrace-ml/terrace/table"
)

// serve runs c's driver and HTTP API until the test ends, and returns a
// client of it.
func serve(t *testing.T, c *Coordinator) *api.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	hs := httptest.NewServer(c.Handler())
	t.Cleanup(func() {
		hs.Close()
		cancel()
		<-done
	})
	cl := api.NewClient(hs.URL, nil)
	cl.RetryFor = 0
	return cl
}

// serveAgain returns another client of c's API, served apart from the
// driver serve runs (which must already run).
func serveAgain(t *testing.T, c *Coordinator) *api.Client {
	t.Helper()
	hs := httptest.NewServer(c.Handler())
	t.Cleanup(hs.Close)
	cl := api.NewClient(hs.URL, nil)
	cl.RetryFor = 0
	return cl
}

// TestHTTP: the API over HTTP, with its errors tested by errors.Is on the
// client's side.
func TestHTTP(t *testing.T) {
	c := New(Options{Servers: 1, Workers: 2, Partitions: 2})
	cl := serve(t, c)
	ctx := t.Context()
	l, err := cl.JoinServer(ctx, "s0", "127.0.0.1:1", "")
	if err != nil || l.Epoch != 1 || l.Ready {
		t.Fatalf("join: %+v %v", l, err)
	}
	woke := make(chan *layout.Layout, 1)
	go func() {
		nl, _ := cl.Layout(ctx, l.Version)
		woke <- nl
	}()
	if r, err := cl.JoinWorker(ctx, "w0", ""); err != nil || r != 0 {
		t.Fatalf("join worker: %d %v", r, err)
	}
	if nl := <-woke; nl == nil || nl.Version <= l.Version {
		t.Fatalf("long-poll woke with %+v", nl)
	}
	if _, err := cl.JoinWorker(ctx, "w1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.JoinWorker(ctx, "w1", ""); err != nil {
		t.Fatal(err)
	}
	spec := table.Spec{Name: "w", Width: 4}
	if _, err := cl.CreateTable(ctx, spec); err != nil {
		t.Fatal(err)
	}
	spec.Width = 5
	if _, err := cl.CreateTable(ctx, spec); !errors.Is(err, api.ErrTableConflict) {
		t.Fatalf("conflicting table: %v", err)
	}
	if _, err := cl.CreateTable(ctx, table.Spec{Name: "bad"}); !errors.Is(err, table.ErrInvalid) {
		t.Fatalf("invalid table: %v", err)
	}
	if err := cl.Heartbeat(ctx, 9, 0); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("heartbeat of rank 9: %v", err)
	}
	// A worker of another job (one declared dead that outlived its job)
	// is refused whatever its rank; one of this job is heard.
	stale := serveAgain(t, c)
	stale.SetJob(3)
	if err := stale.Heartbeat(ctx, 0, 0); !errors.Is(err, api.ErrLeaseLost) {
		t.Fatalf("heartbeat of a worker of job 4: %v, want %v", err, api.ErrLeaseLost)
	}
	stale.SetJob(0)
	if err := stale.Heartbeat(ctx, 0, 0); err != nil {
		t.Fatalf("heartbeat of a worker of this job: %v", err)
	}
	if _, err := cl.Split(ctx, api.Split{Rank: 1, Partition: 1, From: 10}); err != nil {
		t.Fatalf("split of a free piece: %v", err) // a plain grant
	}
	if err := cl.Report(ctx, 0, map[string]int{"x": 1}); err != nil {
		t.Fatal(err)
	}
	// A long job's report lists every pass: 10,000 of them are 2 MB.
	type pass struct {
		Pass    int     `json:"pass"`
		Seconds float64 `json:"seconds"`
		AUC     float64 `json:"test_auc"`
	}
	long := make([]pass, 10000)
	for i := range long {
		long[i] = pass{i, 0.123456789012345, 0.901234567890123}
	}
	if err := cl.Report(ctx, 0, map[string]any{"passes": long, "pad": strings.Repeat("x", 1<<20)}); err != nil {
		t.Fatalf("a report of 10,000 passes: %v", err)
	}
	select {
	case <-c.Done():
		t.Fatal("done after one of two reports")
	default:
	}
	if err := cl.Report(ctx, 1, "ok"); err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if r, err := cl.Reports(ctx); err != nil || len(r) != 2 {
		t.Fatalf("reports %v %v", r, err)
	}
}

// TestStatesOverHTTP: a state blob reported with an offset is what the
// piece's next holder fetches; a version replaced is refused
// (ErrLeaseLost) and deleted from the store; a blob over the limit is
// refused (ErrStateTooLarge).
func TestStatesOverHTTP(t *testing.T) {
	c := New(Options{Servers: 1, Workers: 2, Partitions: 2})
	ctx := t.Context()
	st := &deleteTracking{deleted: make(chan StateRef, 8)}
	if err := c.SetStateStore(ctx, st); err != nil {
		t.Fatal(err)
	}
	cl := serve(t, c)
	cl.JoinServer(ctx, "s0", "a:1", "")
	cl.JoinWorker(ctx, "w0", "")
	cl.JoinWorker(ctx, "w1", "")
	g, err := cl.Acquire(ctx, 0, 0)
	if err != nil || g.Partition != 0 {
		t.Fatalf("grant %+v %v", g, err)
	}
	r1, err := cl.Progress(ctx, api.Update{Partition: 0, Offset: 10, State: []byte("rows<10"), HasState: true})
	if err != nil || r1.State == 0 {
		t.Fatalf("progress: %+v %v", r1, err)
	}
	r2, err := cl.Progress(ctx, api.Update{Partition: 0, Offset: 20, State: []byte("rows<20"), HasState: true})
	if err != nil || r2.State <= r1.State {
		t.Fatalf("progress: %+v %v", r2, err)
	}
	if _, err := cl.State(ctx, 0, r1.State); !errors.Is(err, api.ErrLeaseLost) {
		t.Fatalf("replaced version: %v, want ErrLeaseLost", err)
	}
	if d := <-st.deleted; d != (StateRef{0, r1.State}) {
		t.Fatalf("deleted %+v, want version %d of partition 0", d, r1.State)
	}
	if b, err := cl.State(ctx, 0, r2.State); err != nil || string(b) != "rows<20" {
		t.Fatalf("current version: %q %v", b, err)
	}
	big := api.Update{Partition: 0, Offset: 30, State: make([]byte, api.MaxStateBytes+1), HasState: true}
	if _, err := c.progress(ctx, big); !errors.Is(err, api.ErrStateTooLarge) { // not over HTTP: 22 MB of JSON
		t.Fatalf("oversized state: %v", err)
	}
}

// TestHeartbeatsNotBehindSave: a save that takes three failure timeouts
// (etcd electing a leader, say) holds back the replies that depend on it,
// but not heartbeats, so no live worker is declared dead for the time the
// coordinator spent saving. (The coordinator used to hold its lock through
// saves, and made up for it by back-dating heartbeats.)
func TestHeartbeatsNotBehindSave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		c := New(Options{Servers: 1, Workers: 1, Partitions: 1, FailureTimeout: timeout})
		var slow atomic.Bool
		c.SetPersist(func(ctx context.Context, _ *Save, _ *layout.Layout) (uint64, error) {
			if slow.Load() {
				time.Sleep(3 * timeout) // fake time
			}
			return 0, nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go c.Run(ctx)
		join(t, c, api.Join{Role: api.RoleServer, ID: "s0", Addr: "a:1"})
		join(t, c, api.Join{Role: api.RoleWorker, ID: "w0"})
		slow.Store(true)
		granted := make(chan api.Grant, 1)
		go func() {
			r, _ := c.call(ctx, func(m *Machine, id uint64) { m.Acquire(id, api.Acquire{Rank: 0}) })
			granted <- r.Grant
		}()
		for range 14 { // heartbeats, every timeout/5, through the save
			time.Sleep(timeout / 5)
			if err := c.Heartbeat(0, 0); err != nil {
				t.Fatalf("heartbeat during the save: %v", err)
			}
			select {
			case <-granted:
				t.Fatal("grant answered before its save ended")
			default:
			}
		}
		if g := <-granted; g.Lease == 0 {
			t.Fatalf("grant %+v", g)
		}
		synctest.Wait()
		if l := c.current(); slices.Contains(l.Finished, 0) {
			t.Fatalf("the heartbeating worker was declared dead: finished %v", l.Finished)
		}
	})
}

func join(t *testing.T, c *Coordinator, j api.Join) {
	t.Helper()
	if _, err := c.call(t.Context(), func(m *Machine, id uint64) { m.Join(id, j) }); err != nil {
		t.Fatal(err)
	}
}

// TestFailedSaveStops: a coordinator whose save failed answers nothing
// more, and shows no layout, with a code that sends clients elsewhere.
func TestFailedSaveStops(t *testing.T) {
	c := New(Options{Servers: 1, Workers: 1})
	c.SetPersist(func(context.Context, *Save, *layout.Layout) (uint64, error) {
		return 0, errors.New("etcd: lost the lead")
	})
	cl := serve(t, c)
	ctx := t.Context()
	if _, err := cl.JoinServer(ctx, "s0", "a:1", ""); !errors.Is(err, api.ErrNotPersisted) || !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("join with a failing store: %v", err)
	}
	if _, err := cl.Layout(ctx, 0); !errors.Is(err, api.ErrNotPersisted) {
		t.Fatalf("layout after a failed save: %v", err)
	}
	if err := c.Heartbeat(0, 0); !errors.Is(err, api.ErrNotPersisted) {
		t.Fatalf("heartbeat after a failed save: %v", err)
	}
}

// TestStopDuringSaveIsNoError: a coordinator stopped (SIGTERM) while a
// save is under way logs no error: its save fails only because it stops.
func TestStopDuringSaveIsNoError(t *testing.T) {
	var logged bytes.Buffer
	c := New(Options{Servers: 1, Workers: 1, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	saving := make(chan struct{})
	c.SetPersist(func(ctx context.Context, _ *Save, _ *layout.Layout) (uint64, error) {
		close(saving)
		<-ctx.Done()
		return 0, fmt.Errorf("meta: put snapshot: %w", ctx.Err())
	})
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		c.Run(ctx)
	}()
	joined := make(chan error, 1)
	go func() {
		_, err := c.call(t.Context(), func(m *Machine, id uint64) { m.Join(id, api.Join{Role: api.RoleServer, ID: "s0", Addr: "a:1"}) })
		joined <- err
	}()
	<-saving
	cancel()
	<-ran
	if err := <-joined; !errors.Is(err, api.ErrNotPersisted) {
		t.Fatalf("the join whose save the stop cut: %v, want %v", err, api.ErrNotPersisted)
	}
	if strings.Contains(logged.String(), "level=ERROR") {
		t.Fatalf("a stop logged an error:\n%s", logged.String())
	}
}

// TestEpochNumberedByStore: under etcd the save that begins an epoch
// numbers it; a restored coordinator goes on from that number.
func TestEpochNumberedByStore(t *testing.T) {
	var saved Saved
	rev := uint64(100)
	persist := func(_ context.Context, s *Save, l *layout.Layout) (uint64, error) {
		saved.Apply(s)
		rev += 7
		if l == nil {
			return 0, nil
		}
		return rev, nil
	}
	c := New(Options{Servers: 2, Workers: 1, Replication: 2})
	c.SetPersist(persist)
	cl := serve(t, c)
	ctx := t.Context()
	cl.JoinServer(ctx, "s0", "a:1", "")
	l, err := cl.JoinServer(ctx, "s1", "a:2", "")
	if err != nil || l.Epoch != rev || l.PrevEpoch != rev-7 {
		t.Fatalf("layout %+v %v: want epoch %d after %d", l, err, rev, rev-7)
	}
	n := New(Options{Servers: 2, Workers: 1, Replication: 2})
	if err := n.Restore(saved, l.Epoch); err != nil {
		t.Fatal(err)
	}
	n.SetPersist(persist)
	ncl := serve(t, n)
	nl, err := ncl.JoinServer(ctx, "s1", "moved:2", "")
	if err != nil || nl.PrevEpoch != l.Epoch || nl.Epoch != rev {
		t.Fatalf("after restore: %+v %v; want epoch %d after %d", nl, err, rev, l.Epoch)
	}
}

// TestMemberGoneDials: a server whose registration ended is dialled, and
// taken out when nothing answers.
func TestMemberGoneDials(t *testing.T) {
	c := New(Options{Servers: 2, Workers: 1, Replication: 2, FailureTimeout: 200 * time.Millisecond})
	cl := serve(t, c)
	ctx := t.Context()
	cl.JoinServer(ctx, "s0", "127.0.0.1:1", "i0")
	cl.JoinServer(ctx, "s1", "127.0.0.1:1", "i1") // nothing listens on port 1
	if !c.MemberGone(ctx, api.RoleServer, "s1", "i1") {
		t.Fatal("a server that does not answer stayed")
	}
	if c.MemberGone(ctx, api.RoleServer, "s0", "old") {
		t.Fatal("an earlier incarnation's registration took a server out")
	}
}

// TestOtherServerAtAddress: a server whose address another server now
// listens at (a cluster stopped and started again on the same ports) is
// taken out; the other's answers to the pings kept it in the layout,
// holding its slots, and the new servers joined for good.
func TestOtherServerAtAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(server.Options{ID: "new"})
	go s.Serve(t.Context(), ln)
	addr := ln.Addr().String()
	c := New(Options{Servers: 2, Workers: 1, Replication: 2, FailureTimeout: 200 * time.Millisecond})
	cl := serve(t, c)
	ctx := t.Context()
	cl.JoinServer(ctx, "old", addr, "i0")
	cl.JoinServer(ctx, "new", addr, "i1")
	if !c.MemberGone(ctx, api.RoleServer, "old", "i0") {
		t.Fatal("a server whose address another server answers at stayed")
	}
	if c.MemberGone(ctx, api.RoleServer, "new", "i1") {
		t.Fatal("the server that answers at its address was taken out")
	}
}

// TestCheckpointCarriesStates: a checkpoint holds every partition's state
// (a split one in pieces); a resume hands them out again, and a damaged
// state file makes the resume fall back to the previous checkpoint.
func TestCheckpointCarriesStates(t *testing.T) {
	dir := t.TempDir()
	c := New(Options{Servers: 1, Workers: 2, Partitions: 2, CheckpointDir: dir, CheckpointEvery: 1})
	cl := serve(t, c)
	ctx := t.Context()
	cl.JoinServer(ctx, "s0", "a:1", "")
	cl.JoinWorker(ctx, "w0", "")
	cl.JoinWorker(ctx, "w1", "")
	pass := func(e int, state string) {
		t.Helper()
		for rank := range 2 {
			g, err := cl.Acquire(ctx, rank, e)
			if err != nil {
				t.Fatal(err)
			}
			u := api.Update{Rank: rank, Pass: e, Partition: g.Partition, Lease: g.Lease, Offset: 10, State: []byte(state), HasState: true}
			if e == 1 && rank == 0 { // pass 1 splits partition 0 at row 10
				u.Cut = &api.Cut{At: 10, State: []byte("tail"), HasState: true}
			}
			if _, err := cl.Progress(ctx, u); err != nil {
				t.Fatal(err)
			}
			u.Cut, u.Complete = nil, true
			if _, err := cl.Progress(ctx, u); err != nil {
				t.Fatal(err)
			}
		}
		if e == 1 {
			g, err := cl.Acquire(ctx, 0, e)
			if err != nil || g.Start != 10 {
				t.Fatalf("the tail: %+v %v", g, err)
			}
			cl.Progress(ctx, api.Update{Pass: e, Partition: g.Partition, Lease: g.Lease, Offset: 20, State: []byte("tail-done"), HasState: true, Complete: true})
		}
		l := awaitLayout(t, cl, func(l *layout.Layout) bool { return l.Checkpoint != nil })
		writePart(t, dir, "s0", l.Checkpoint.Seq)
		if err := cl.Checkpointed(ctx, "s0", l.Checkpoint.Seq, nil); err != nil {
			t.Fatal(err)
		}
		awaitLayout(t, cl, func(l *layout.Layout) bool { return l.Checkpoint == nil })
	}
	pass(0, "after-0")
	pass(1, "after-1")
	if cs := c.Checkpoints(); len(cs) != 2 || cs[1].Pass != 1 {
		t.Fatalf("checkpoints %+v", cs)
	}
	resumed := func() map[int][]string {
		t.Helper()
		r, err := Open(Options{Servers: 1, Workers: 2, Partitions: 2, CheckpointDir: dir, Resume: true})
		if err != nil {
			t.Fatal(err)
		}
		got := map[int][]string{}
		for p, vers := range r.StateVersions() {
			for _, v := range vers {
				b, err := r.State(ctx, p, v)
				if err != nil {
					t.Fatal(err)
				}
				got[p] = append(got[p], string(b))
			}
		}
		return got
	}
	if got := resumed(); !slices.Equal(got[0], []string{"after-1", "tail-done"}) || !slices.Equal(got[1], []string{"after-1"}) {
		t.Fatalf("resumed states %v", got)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "partstate-*"))
	if len(files) != 2 {
		t.Fatalf("state files %v", files)
	}
	b, _ := os.ReadFile(files[1])
	b[len(b)/2] ^= 0xff
	os.WriteFile(files[1], b, 0o644)
	if got := resumed(); !slices.Equal(got[0], []string{"after-0"}) {
		t.Fatalf("after damaging the newest state file, resumed states %v; want the previous checkpoint's", got)
	}
}

// writePart writes server id's part of cluster checkpoint seq under dir,
// with one table of one key, as a server would before it reports.
func writePart(t *testing.T, dir, id string, seq uint64) {
	t.Helper()
	w, err := checkpoint.Create(checkpoint.ServerDir(dir, id), seq)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.WriteTable(t.Context(), "t1", table.Spec{Name: "w", Width: 1}, func(fn func(uint64, []float32, [][]float32) bool) {
		fn(7, []float32{float32(seq)}, nil)
	})
	if err == nil {
		_, err = w.Commit(checkpoint.Meta{Pass: int(seq)})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestResumePassesOverDamagedPart: a committed checkpoint one of whose
// servers' parts is damaged or gone is passed over for the previous one,
// which every server can load; without an intact one the resume fails at
// once, naming the damage, instead of leaving the layout unready.
func TestResumePassesOverDamagedPart(t *testing.T) {
	dir := t.TempDir()
	for seq := uint64(1); seq <= 2; seq++ {
		writePart(t, dir, "s0", seq)
		writePart(t, dir, "s1", seq)
		meta := fmt.Sprintf(`{"seq":%d,"pass":%d,"servers":["s0","s1"],"tables":[],"partitions":2,"time":"2026-01-01T00:00:00Z"}`, seq, seq)
		if err := checkpoint.CommitCluster(dir, seq, []byte(meta)); err != nil {
			t.Fatal(err)
		}
	}
	resumedSeq := func() (uint64, error) {
		t.Helper()
		c, err := Open(Options{Servers: 2, Workers: 1, Partitions: 2, CheckpointDir: dir, Resume: true})
		if err != nil {
			return 0, err
		}
		return c.m.st.Layout.Resume.Seq, nil
	}
	if seq, err := resumedSeq(); err != nil || seq != 2 {
		t.Fatalf("intact: resumed %d, %v; want 2", seq, err)
	}
	f := filepath.Join(checkpoint.ServerDir(dir, "s1"), "ckpt-0000000002", "t1")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if seq, err := resumedSeq(); err != nil || seq != 1 {
		t.Fatalf("s1's newest part damaged: resumed %d, %v; want 1", seq, err)
	}
	if ck, err := LatestCommitted(t.Context(), dir); err != nil || ck.Seq != 1 || len(ck.Skipped) != 1 || !errors.Is(ck.Skipped[0], checkpoint.ErrCorrupt) {
		t.Fatalf("LatestCommitted: %+v, %v; want checkpoint 1, checkpoint 2 skipped as corrupt", ck, err)
	}
	if err := os.RemoveAll(checkpoint.ServerDir(dir, "s0")); err != nil {
		t.Fatal(err)
	}
	if _, err := resumedSeq(); !errors.Is(err, checkpoint.ErrNoCheckpoint) {
		t.Fatalf("s0's parts gone: %v; want ErrNoCheckpoint", err)
	}
}

func awaitLayout(t *testing.T, cl *api.Client, ok func(*layout.Layout) bool) *layout.Layout {
	t.Helper()
	var after uint64
	for {
		l, err := cl.Layout(t.Context(), after)
		if err != nil {
			t.Fatal(err)
		}
		if ok(l) {
			return l
		}
		after = l.Version
	}
}

// deleteTracking is a memory StateStore that tells of its deletions.
type deleteTracking struct {
	memStates
	deleted chan StateRef
}

func (s *deleteTracking) DeleteState(ctx context.Context, p int, ver uint64) error {
	s.deleted <- StateRef{p, ver}
	return s.memStates.DeleteState(ctx, p, ver)
}

// TestResumeReadsEpochRecords: a commit record written before the
// training pass was named "pass" resumes after the pass it called "epoch".
func TestResumeReadsEpochRecords(t *testing.T) {
	dir := t.TempDir()
	meta := `{"seq":3,"epoch":4,"servers":["s0"],"tables":[],"partitions":2,"max_clock":7,"time":"2026-01-01T00:00:00Z"}`
	writePart(t, dir, "s0", 3)
	if err := checkpoint.CommitCluster(dir, 3, []byte(meta)); err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Servers: 1, Workers: 1, Partitions: 2, CheckpointDir: dir, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if r, done := c.m.st.Layout.Resume, c.m.st.DoneBefore; r == nil || r.Pass != 4 || done != 5 {
		t.Fatalf("resumed %+v, passes done before %d; want after pass 4", r, done)
	}
}

// TestResumeKeepsJobNumber: a cluster's third job, checkpointed and
// resumed by a new coordinator, is job 3 there too (it was job 1 whatever
// its number: in status, events and export); a record written before the
// number was kept resumes as job 1.
func TestResumeKeepsJobNumber(t *testing.T) {
	dir := t.TempDir()
	m := NewMachine(Config{Servers: 1, Workers: 1, Partitions: 2, Replication: 1, CheckpointDir: dir}, t0)
	m.st.Layout.Job = 2 // the cluster's third job
	m.st.Layout.Checkpoint = &layout.Checkpoint{Dir: dir, Seq: 1, Pass: 2, Servers: []string{"s0"}}
	m.st.Checkpoint.Reported = map[string]bool{"s0": true}
	m.commitIfReported()
	ck := m.out.Commit
	if ck == nil || ck.JobNumber != 3 {
		t.Fatalf("commit %+v; want job number 3", ck)
	}
	writePart(t, dir, "s0", 1)
	w, err := Open(Options{Servers: 1, Workers: 1, Partitions: 2, CheckpointDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.commit(t.Context(), ck); err != nil {
		t.Fatal(err)
	}
	resumedNumber := func() uint64 {
		t.Helper()
		c, err := Open(Options{Servers: 1, Workers: 1, Partitions: 2, CheckpointDir: dir, Resume: true})
		if err != nil {
			t.Fatal(err)
		}
		return c.m.JobStatus().Number
	}
	if n := resumedNumber(); n != 3 {
		t.Fatalf("resumed as job %d, want 3", n)
	}
	writePart(t, dir, "s0", 2)
	old := `{"seq":2,"pass":3,"servers":["s0"],"tables":[],"partitions":2,"time":"2026-01-01T00:00:00Z"}`
	if err := checkpoint.CommitCluster(dir, 2, []byte(old)); err != nil {
		t.Fatal(err)
	}
	if n := resumedNumber(); n != 1 {
		t.Fatalf("a record without a job number resumed as job %d, want 1", n)
	}
}

// TestCheckpointsNumberedAfterTheDirectory: a new cluster given a
// checkpoint directory that holds another job's checkpoints numbers its
// own after them. Numbered from 1, its first replaced that job's commit
// record 1, and a resume or an export took that job's checkpoint 2 as
// the newest.
func TestCheckpointsNumberedAfterTheDirectory(t *testing.T) {
	dir := t.TempDir()
	for seq := uint64(1); seq <= 2; seq++ {
		writePart(t, dir, "s0", seq)
		meta := fmt.Sprintf(`{"seq":%d,"pass":%d,"servers":["s0"],"tables":[],"partitions":2,"time":"2026-01-01T00:00:00Z"}`, seq, seq)
		if err := checkpoint.CommitCluster(dir, seq, []byte(meta)); err != nil {
			t.Fatal(err)
		}
	}
	writePart(t, dir, "s1", 5) // a server's part of a checkpoint never committed
	c, err := Open(Options{Servers: 1, Workers: 1, Partitions: 2, CheckpointDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if seq := c.m.st.Checkpoint.Seq + 1; seq != 6 {
		t.Fatalf("the first checkpoint is numbered %d, want 6 (after everything under the directory)", seq)
	}
	c, err = Open(Options{Servers: 1, Workers: 1, Partitions: 2, CheckpointDir: filepath.Join(dir, "new")})
	if err != nil {
		t.Fatalf("a directory not made yet: %v", err)
	}
	if c.m.st.Checkpoint.Seq != 0 {
		t.Fatalf("a directory not made yet: last checkpoint %d, want none", c.m.st.Checkpoint.Seq)
	}
}

// TestResumeInsidePass: a commit record of a checkpoint taken inside a
// pass resumes with that pass's pieces at their offsets; one whose pieces
// do not tile the partitions is passed over as a damaged record is, for
// the previous checkpoint; a record without pieces (a pass boundary's, or
// one written before they were kept) resumes as before.
func TestResumeInsidePass(t *testing.T) {
	const boundary = `{"seq":1,"pass":2,"servers":["s0"],"tables":[],"partitions":2,"time":"2026-01-01T00:00:00Z"}`
	inside := func(seq int, pieces string) string {
		return fmt.Sprintf(`{"seq":%d,"pass":3,"servers":["s0"],"tables":[],"partitions":2,"time":"2026-01-01T00:00:00Z","in_pass":{"pass":4,"pieces":[%s]}}`, seq, pieces)
	}
	const good = `{"partition":0,"start":0,"offset":40,"end":-1},{"partition":1,"start":0,"offset":10,"end":20},{"partition":1,"start":20,"offset":20,"end":-1,"done":true}`
	for _, tc := range []struct {
		name   string
		newest string
		seq    uint64
		pieces string // the resumed pass's, as printed below
	}{
		{"inside a pass", inside(2, good), 2, "4: [0,end)@40 | [0,20)@10 [20,end)@20 done"},
		{"a boundary", boundary, 2, ""},
		{"inside the first pass", strings.NewReplacer(`"pass":3`, `"pass":-1`, `"pass":4`, `"pass":0`).Replace(inside(2, good)), 2, "0: [0,end)@40 | [0,20)@10 [20,end)@20 done"},
		{"a gap", inside(2, `{"partition":0,"start":0,"offset":0,"end":-1},{"partition":1,"start":0,"offset":0,"end":20},{"partition":1,"start":30,"offset":30,"end":-1}`), 1, ""},
		{"a partition missing", inside(2, `{"partition":0,"start":0,"offset":0,"end":-1}`), 1, ""},
		{"an offset outside its piece", inside(2, `{"partition":0,"start":0,"offset":30,"end":20},{"partition":0,"start":20,"offset":20,"end":-1},{"partition":1,"start":0,"offset":0,"end":-1}`), 1, ""},
		{"a partition out of range", inside(2, good+`,{"partition":2,"start":0,"offset":0,"end":-1}`), 1, ""},
		{"another pass", strings.Replace(inside(2, good), `"pass":4`, `"pass":5`, 1), 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writePart(t, dir, "s0", 1)
			writePart(t, dir, "s0", 2)
			newest := strings.Replace(tc.newest, `"seq":1`, `"seq":2`, 1)
			for seq, meta := range map[uint64]string{1: boundary, 2: newest} {
				if err := checkpoint.CommitCluster(dir, seq, []byte(meta)); err != nil {
					t.Fatal(err)
				}
			}
			c, err := Open(Options{Servers: 1, Workers: 1, Partitions: 2, CheckpointDir: dir, Resume: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.m.st.Layout.Resume.Seq; got != tc.seq {
				t.Fatalf("resumed checkpoint %d; want %d", got, tc.seq)
			}
			var got []string
			for _, e := range c.m.passNumbers() {
				var parts []string
				for _, pcs := range c.m.st.Passes[e].Parts {
					var s []string
					for _, pc := range pcs {
						x := fmt.Sprintf("%s@%d", pc.String(), pc.Offset)
						if pc.Done {
							x += " done"
						}
						s = append(s, x)
					}
					parts = append(parts, strings.Join(s, " "))
				}
				got = append(got, fmt.Sprintf("%d: %s", e, strings.Join(parts, " | ")))
			}
			if strings.Join(got, "; ") != tc.pieces {
				t.Fatalf("resumed pieces %q; want %q", strings.Join(got, "; "), tc.pieces)
			}
		})
	}
}

// TestKilledWorkerFoundInHalfATimeout: a worker whose process dies
// closes the connection its heartbeats came on, and the coordinator
// declares it dead half a failure timeout later, where a silent worker
// (its connection open) waits the whole timeout.
func TestKilledWorkerFoundInHalfATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 3 * time.Second
		n := simnet.New(simnet.Config{Seed: 1})
		defer n.Close()
		ln, err := n.Host("coordinator").Listen("coordinator:7070")
		if err != nil {
			t.Fatal(err)
		}
		c := New(Options{Servers: 1, Workers: 2, Partitions: 2, FailureTimeout: timeout})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go c.Serve(ctx, ln, nil)
		join(t, c, api.Join{Role: api.RoleServer, ID: "s0", Addr: "a:1"})
		clients := map[string]*api.Client{}
		for _, w := range []string{"w0", "w1"} {
			join(t, c, api.Join{Role: api.RoleWorker, ID: w})
			clients[w] = api.NewClient(ln.Addr().String(), n.Host(w))
			clients[w].RetryFor = 0
		}
		for rank, w := range []string{"w0", "w1"} {
			if err := clients[w].Heartbeat(ctx, rank, 0); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		n.Crash("w0")                          // killed: its connection resets
		n.Partition("w1", "coordinator")       // silent: its connection stays open
		time.Sleep(timeout/2 + 2*maxTickEvery) // fake time
		synctest.Wait()
		if f := c.current().Finished; !slices.Equal(f, []int{0}) {
			t.Fatalf("%v after the kill: finished %v, want [0] (the killed worker alone)", time.Since(start), f)
		}
		time.Sleep(timeout)
		synctest.Wait()
		if f := c.current().Finished; !slices.Equal(f, []int{0, 1}) {
			t.Fatalf("a timeout after the partition: finished %v, want [0 1]", f)
		}
	})
}
