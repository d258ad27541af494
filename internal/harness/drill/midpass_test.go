package drill_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/harness/drill"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// TestResumeInsidePass takes a checkpoint inside a pass while the workers
// train (POST /v1/checkpoint?now=true), stops the whole cluster once it
// is committed, and resumes from it: the checkpoint names the pass in
// progress and holds every audit increment acknowledged before it was
// asked for, and the resumed job trains every row of every pass at least
// once, with nothing its workers acknowledged missing from the servers at
// the end.
func TestResumeInsidePass(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const rows, passes, workers = 503, 3, 2
	train := writeData(t, rows)
	dir := t.TempDir()
	cfg := lr.DefaultConfig()
	cfg.Train, cfg.Passes, cfg.Batch = train, passes, 5
	local := func(resume bool) *node.Local {
		l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: workers, Partitions: workers, Replication: 2, CheckpointDir: dir, Resume: resume})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	// The first cluster: rank 0's 75th acknowledged minibatch (half way
	// through the second pass: each rank trains its partition of about
	// 250 rows, 50 minibatches, a pass, and records its offset every 8)
	// asks for the checkpoint; the workers are stopped once it is
	// committed.
	l := local(false)
	var mu sync.Mutex
	seen := map[int]int64{}
	var before map[int]int64 // acknowledged when the checkpoint was asked for
	asked := make(chan uint64, 1)
	wctx, stop := context.WithCancel(ctx)
	onAck := func(rank int, acked int64, _ time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		seen[rank] = acked
		if rank == 0 && acked == 75 && before == nil {
			before = map[int]int64{0: seen[0], 1: seen[1]}
			seq, err := api.NewClient(l.CoordAddr, nil).RequestCheckpoint(ctx, true)
			if err != nil {
				return err
			}
			asked <- seq
		}
		return nil
	}
	go func() {
		var seq uint64
		select {
		case seq = <-asked:
		case <-ctx.Done():
			return
		}
		for ctx.Err() == nil {
			if l.Coord.Status().Checkpoint.Committed >= seq {
				stop()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err := l.RunWorkers(wctx, func(ctx context.Context, c *ps.Client) (any, error) {
		a, err := drill.StartAudit(ctx, c, onAck)
		if err != nil {
			return nil, err
		}
		defer a.Close()
		return lr.Run(ctx, c, cfg)
	})
	if wctx.Err() == nil {
		t.Fatalf("the job ended before its checkpoint was committed: %v; checkpoints %+v, %v", err, l.Coord.Status().Checkpoint, before)
	}
	l.Close()

	ck, err := coord.LatestCommitted(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.InPass == nil || ck.InPass.Pass != ck.Pass+1 {
		t.Fatalf("checkpoint %d after pass %d names no pass in progress: %+v", ck.Seq, ck.Pass, ck.InPass)
	}
	saved, err := drill.CheckpointAudit(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	for r, n := range before {
		if saved.ByRank[r] < n {
			t.Errorf("rank %d: %d increments acknowledged before the checkpoint was asked for, %d in it", r, n, saved.ByRank[r])
		}
	}
	t.Logf("checkpoint %d inside pass %d: %+v; acknowledged when asked %v, saved %v", ck.Seq, ck.InPass.Pass, ck.InPass.Pieces, before, saved.ByRank)

	// The second cluster resumes from it and trains to the end.
	l = local(true)
	defer l.Close()
	closed, perWorker, perRow := trainAudited(t, ctx, l, cfg, func(int, int64, time.Time) error { return nil }, workers, rows)
	for r := range workers {
		if want := float32(saved.ByRank[r] + closed[r]); perWorker[r] != want {
			t.Errorf("rank %d: servers hold %v increments; want the checkpoint's %d and the %d acknowledged since", r, perWorker[r], saved.ByRank[r], closed[r])
		}
	}
	// Rows after the recorded offsets that the parts hold too are
	// trained again (more than once if the parts were written after the
	// pass ended and the next began: nothing is held).
	again := 0
	for r, n := range perRow {
		if n < passes {
			t.Errorf("row %d trained %v times; want at least %d", r, n, passes)
		}
		if n > passes {
			again++
		}
	}
	t.Logf("%d of %d rows trained again after the resume", again, rows)
}
