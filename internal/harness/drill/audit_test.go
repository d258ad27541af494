package drill_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/internal/harness/drill"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// writeData writes n random LIBSVM rows over 30 features.
func writeData(t *testing.T, n int) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for range n {
		label := "-1"
		if rng.IntN(2) == 1 {
			label = "+1"
		}
		b.WriteString(label)
		for f := 1; f <= 30; f++ {
			if rng.IntN(4) == 0 {
				fmt.Fprintf(&b, " %d:1", f)
			}
		}
		b.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "train.svm")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAuditCountsEveryPushAndRow trains an app that knows nothing of the
// audit with an Auditor on each worker, and checks that each worker's
// acknowledged count equals its counter on the servers and that every row
// was trained once per pass.
func TestAuditCountsEveryPushAndRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const rows, passes, workers = 503, 3, 2
	train := writeData(t, rows)
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: workers, Replication: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := lr.DefaultConfig()
	cfg.Train, cfg.Passes, cfg.Batch = train, passes, 17
	var mu sync.Mutex
	seen := map[int]int64{}
	onAck := func(rank int, acked int64, _ time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		if acked != seen[rank]+1 {
			return fmt.Errorf("rank %d: ack count %d after %d", rank, acked, seen[rank])
		}
		seen[rank] = acked
		return nil
	}
	closed, perWorker, perRow := trainAudited(t, ctx, l, cfg, onAck, workers, rows)
	for rank := range workers {
		if closed[rank] == 0 || float32(closed[rank]) != perWorker[rank] || seen[rank] != closed[rank] {
			t.Errorf("rank %d: auditor counted %d acknowledged, hook saw %d, servers hold %v", rank, closed[rank], seen[rank], perWorker[rank])
		}
	}
	for r, n := range perRow {
		if n != passes {
			t.Errorf("row %d trained %v times, want %d", r, n, passes)
		}
	}
}

// trainAudited trains lr with cfg on l's workers, each under the drill's
// audit (onAck its hook), and reads the audit back: what each rank's
// auditor counted acknowledged, and the servers' counts by worker and by
// row.
func trainAudited(t *testing.T, ctx context.Context, l *node.Local, cfg lr.Config, onAck func(int, int64, time.Time) error, workers, rows int) (closed map[int]int64, perWorker, perRow []float32) {
	t.Helper()
	var mu sync.Mutex
	closed = map[int]int64{}
	_, err := l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		a, err := drill.StartAudit(ctx, c, onAck)
		if err != nil {
			return nil, err
		}
		rep, err := lr.Run(ctx, c, cfg)
		n := a.Close()
		mu.Lock()
		closed[c.Rank()] = n
		mu.Unlock()
		return rep, err
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := ps.Dial(ctx, l.CoordAddr, ps.Options{Rank: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	perWorker, perRow, err = drill.ReadAudit(ctx, c, workers, rows)
	if err != nil {
		t.Fatal(err)
	}
	return closed, perWorker, perRow
}
