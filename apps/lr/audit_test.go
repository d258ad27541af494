package lr_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/apps/lr"
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

// TestAuditCountsEveryPushAndRow trains with the audit on and checks that
// each worker's acknowledged count equals its counter on the servers and
// that every row was trained once per epoch.
func TestAuditCountsEveryPushAndRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const rows, epochs, workers = 503, 3, 2
	train := writeData(t, rows)
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: workers, Replication: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := lr.DefaultConfig()
	cfg.Train, cfg.Epochs, cfg.Batch, cfg.Audit = train, epochs, 17, true
	var mu sync.Mutex
	seen := map[int]int64{}
	cfg.OnAuditAck = func(rank int, acked int64, _ time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		if acked != seen[rank]+1 {
			return fmt.Errorf("rank %d: ack count %d after %d", rank, acked, seen[rank])
		}
		seen[rank] = acked
		return nil
	}
	reps, err := l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) { return lr.Run(ctx, c, cfg) })
	if err != nil {
		t.Fatal(err)
	}
	c, err := ps.Dial(ctx, l.CoordAddr, ps.Options{Rank: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	perWorker, perRow, err := lr.ReadAudit(ctx, c, workers, rows)
	if err != nil {
		t.Fatal(err)
	}
	for rank, raw := range reps {
		var rep lr.Report
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.AuditAcked == 0 || float32(rep.AuditAcked) != perWorker[rank] || seen[rank] != rep.AuditAcked {
			t.Errorf("rank %d: report says %d acknowledged, hook saw %d, servers hold %v", rank, rep.AuditAcked, seen[rank], perWorker[rank])
		}
	}
	for r, n := range perRow {
		if n != epochs {
			t.Errorf("row %d trained %v times, want %d", r, n, epochs)
		}
	}
}
