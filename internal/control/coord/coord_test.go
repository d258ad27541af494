package coord

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/table"
)

func TestJoinAndPublish(t *testing.T) {
	c := New(Options{Servers: 2, Workers: 2})
	hs := httptest.NewServer(c.Handler())
	defer hs.Close()
	cl := NewClient(hs.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	l, err := cl.JoinServer(ctx, "s0", "127.0.0.1:1")
	if err != nil || l.Ready || l.Epoch != 1 {
		t.Fatalf("first server: %+v %v", l, err)
	}
	// A long-poll started now wakes when the layout changes.
	woke := make(chan uint64)
	go func() {
		nl, err := cl.Layout(ctx, l.Version)
		if err != nil {
			t.Error(err)
		}
		woke <- nl.Version
	}()
	if _, err := cl.JoinServer(ctx, "s1", "127.0.0.1:2"); err != nil {
		t.Fatal(err)
	}
	if v := <-woke; v <= l.Version {
		t.Fatalf("long-poll returned version %d, not newer than %d", v, l.Version)
	}
	// A server beyond the expected count joins in two phases: first as a
	// joiner, off the ring.
	jl, err := cl.JoinServer(ctx, "s2", "127.0.0.1:3")
	if err != nil || len(jl.Joining) != 1 || len(jl.Servers) != 2 || jl.Epoch != 2 {
		t.Fatalf("third server of two: %+v %v, want it joining at epoch 2", jl, err)
	}
	c.Synced("s0", "s2", jl.Version)
	if l, _ := cl.Layout(ctx, 0); len(l.Joining) != 1 {
		t.Fatal("joiner promoted before every ring server synced it")
	}
	c.Synced("s1", "s2", jl.Version)
	pl, _ := cl.Layout(ctx, 0)
	if len(pl.Joining) != 0 || len(pl.Servers) != 3 || pl.Epoch != 3 {
		t.Fatalf("after both synced: %+v, want s2 on the ring at epoch 3", pl)
	}
	c.RemoveServer("s2", "")
	r0, err := cl.JoinWorker(ctx, "w-a")
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := cl.JoinWorker(ctx, "w-b")
	again, _ := cl.JoinWorker(ctx, "w-a")
	if r0 != 0 || r1 != 1 || again != 0 {
		t.Fatalf("ranks %d %d, rejoin %d", r0, r1, again)
	}
	l, err = cl.Layout(ctx, 0)
	if err != nil || !l.Ready || l.Epoch != 4 || len(l.Servers) != 2 || l.Workers != 2 {
		t.Fatalf("final layout %+v %v", l, err)
	}
	if l.Partitions != 8 {
		t.Fatalf("%d partitions, want 4 per worker", l.Partitions)
	}
}

func TestTables(t *testing.T) {
	c := New(Options{Servers: 1, Workers: 1})
	hs := httptest.NewServer(c.Handler())
	defer hs.Close()
	cl := NewClient(hs.URL)
	ctx := context.Background()
	spec := table.Spec{Name: "w", Width: 4, Rule: table.Rule{Kind: table.Adam}}
	l, err := cl.CreateTable(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	tb, ok := l.Table("w")
	if !ok || tb.Spec.Rule.Beta1 != 0.9 {
		t.Fatalf("table %+v: defaults not filled", tb)
	}
	if _, err := cl.CreateTable(ctx, spec); err != nil {
		t.Fatalf("identical re-create: %v", err)
	}
	spec.Width = 5
	if _, err := cl.CreateTable(ctx, spec); !errors.Is(err, ErrTableConflict) {
		t.Fatalf("conflicting re-create: %v", err)
	}
	if _, err := cl.CreateTable(ctx, table.Spec{Name: "bad", Width: 0}); err == nil {
		t.Fatal("width 0 accepted")
	}
}

func TestReports(t *testing.T) {
	c := New(Options{Servers: 1, Workers: 2})
	hs := httptest.NewServer(c.Handler())
	defer hs.Close()
	cl := NewClient(hs.URL)
	ctx := context.Background()
	if err := cl.Report(ctx, 0, map[string]int{"x": 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
		t.Fatal("done after one of two reports")
	default:
	}
	if err := cl.Report(ctx, 5, 1); err == nil {
		t.Fatal("report from rank 5 of 2 accepted")
	}
	cl.Report(ctx, 1, "ok")
	<-c.Done()
	if r, err := cl.Reports(ctx); err != nil || len(r) != 2 {
		t.Fatalf("reports %v %v", r, err)
	}
}

func TestUnreachable(t *testing.T) {
	cl := NewClient("127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := cl.WaitReachable(ctx); err == nil {
		t.Fatal("reached a closed port")
	}
}

func TestLeasesSurviveRestore(t *testing.T) {
	var saved []byte
	c := New(Options{Servers: 1, Workers: 2, Partitions: 4})
	c.SetPersist(func(_ context.Context, b []byte, _ *layout.Layout) (uint64, error) {
		saved = append(saved[:0], b...)
		return 0, nil
	})
	c.JoinServer("s0", "127.0.0.1:1")
	c.JoinWorker("w0")
	c.JoinWorker("w1")
	ctx := context.Background()
	g, err := c.Acquire(ctx, 0, 0)
	if err != nil || g.Partition != 0 {
		t.Fatalf("grant %+v %v", g, err)
	}
	if _, err := c.Progress(ctx, Update{Rank: 0, Epoch: 0, Partition: 0, Offset: 17, Clock: 5}); err != nil {
		t.Fatal(err)
	}
	// The leader dies before the worker hears of its next grant; a new
	// one restores the saved state.
	c.Acquire(ctx, 1, 0)
	n := New(Options{Servers: 1, Workers: 2, Partitions: 4})
	if err := n.Restore(saved, 0); err != nil {
		t.Fatal(err)
	}
	g, err = n.Acquire(ctx, 0, 0)
	if err != nil || g.Partition != 0 || g.Offset != 17 {
		t.Fatalf("after restore, rank 0 gets %+v %v, want its partition 0 again from offset 17", g, err)
	}
	if l, _ := n.Layout(ctx, 0); !l.Ready || len(l.Servers) != 1 {
		t.Fatalf("restored layout %+v", l)
	}
}

func TestCheckpointOnDemand(t *testing.T) {
	c := New(Options{Servers: 1, Workers: 1, Partitions: 1})
	if err := c.RequestCheckpoint(); err == nil {
		t.Fatal("a checkpoint was accepted without a checkpoint directory")
	}
	c = New(Options{Servers: 1, Workers: 1, Partitions: 1, CheckpointDir: t.TempDir()})
	c.JoinServer("s0", "127.0.0.1:1")
	c.JoinWorker("w0")
	ctx := context.Background()
	if err := c.RequestCheckpoint(); err != nil {
		t.Fatal(err)
	}
	g, _ := c.Acquire(ctx, 0, 0)
	c.Progress(ctx, Update{Partition: g.Partition, Offset: 10, Clock: 1, Complete: true})
	l, _ := c.Layout(ctx, 0)
	if l.Checkpoint == nil || l.Checkpoint.Epoch != 0 {
		t.Fatalf("after epoch 0 with a checkpoint requested: %+v", l.Checkpoint)
	}
	// Epoch 1's work waits for the checkpoint.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(wctx, 0, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("epoch 1 work during the checkpoint: %v", err)
	}
	c.Checkpointed("s0", l.Checkpoint.Seq, "")
	if g, err := c.Acquire(ctx, 0, 1); err != nil || g.Partition != 0 {
		t.Fatalf("epoch 1 work after the checkpoint: %+v %v", g, err)
	}
	if cs := c.Checkpoints(); len(cs) != 1 || cs[0].Epoch != 0 {
		t.Fatalf("checkpoints %+v", cs)
	}
}

// TestJoinerWaitsForNewHeads: a joiner that every surviving server synced
// is not promoted when another ring server fails, since the failed server's
// slots now have heads that have not shipped them yet; reports for a
// layout older than the change do not count either.
func TestJoinerWaitsForNewHeads(t *testing.T) {
	c := New(Options{Servers: 3, Workers: 1})
	for _, s := range []string{"s0", "s1", "s2"} {
		if _, err := c.JoinServer(s, s+":1"); err != nil {
			t.Fatal(err)
		}
	}
	jl, err := c.JoinServer("s3", "s3:1")
	if err != nil || len(jl.Joining) != 1 {
		t.Fatalf("joiner: %+v %v", jl, err)
	}
	c.Synced("s1", "s3", jl.Version)
	c.Synced("s2", "s3", jl.Version)
	c.RemoveServer("s0", "") // s0 never shipped its slots
	l := c.snapshot()
	if len(l.Joining) != 1 || len(l.Servers) != 2 {
		t.Fatalf("after s0 failed: %d joining, %d on the ring; want s3 still joining", len(l.Joining), len(l.Servers))
	}
	c.Synced("s1", "s3", jl.Version) // late reports for the old layout
	c.Synced("s2", "s3", jl.Version)
	if l := c.snapshot(); len(l.Joining) != 1 {
		t.Fatal("joiner promoted on reports for a layout before s0 failed")
	}
	c.Synced("s1", "s3", l.Version)
	c.Synced("s2", "s3", l.Version)
	if l := c.snapshot(); len(l.Joining) != 0 || len(l.Servers) != 3 {
		t.Fatalf("after the new heads synced: %d joining, %d on the ring", len(l.Joining), len(l.Servers))
	}
}

// TestSavedStateDoesNotGrowWithEpochs: complete epochs are forgotten (the
// saved state is rewritten on every change and capped at 1 MiB), and a
// worker asking for work in one still hears that it is done.
func TestSavedStateDoesNotGrowWithEpochs(t *testing.T) {
	var saved []byte
	c := New(Options{Servers: 1, Workers: 1, Partitions: 8})
	c.SetPersist(func(_ context.Context, b []byte, _ *layout.Layout) (uint64, error) {
		saved = append(saved[:0], b...)
		return 0, nil
	})
	c.JoinServer("s0", "127.0.0.1:1")
	c.JoinWorker("w0")
	ctx := context.Background()
	var after3 int
	for e := range 200 {
		for {
			g, err := c.Acquire(ctx, 0, e)
			if err != nil {
				t.Fatal(err)
			}
			if g.Done {
				break
			}
			if _, err := c.Progress(ctx, Update{Epoch: e, Partition: g.Partition, Offset: 100, Lease: g.Lease, Complete: true}); err != nil {
				t.Fatal(err)
			}
		}
		if e == 3 {
			after3 = len(saved)
		}
	}
	if len(saved) > after3+100 {
		t.Fatalf("saved state grew from %d bytes after 4 epochs to %d after 200", after3, len(saved))
	}
	n := New(Options{Servers: 1, Workers: 1, Partitions: 8})
	if err := n.Restore(saved, 0); err != nil {
		t.Fatal(err)
	}
	if g, err := n.Acquire(ctx, 0, 17); err != nil || !g.Done {
		t.Fatalf("work in a forgotten epoch after a restore: %+v %v, want done", g, err)
	}
	if g, err := n.Acquire(ctx, 0, 200); err != nil || g.Done || g.Partition != 0 {
		t.Fatalf("work in the next epoch: %+v %v", g, err)
	}
}
