package mlr_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/apps/mlr"
	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// writeWide writes rows of three classes over 40 features whose indices
// reach 10^12, and with extra set, a feature of its own that the
// training file lacks.
func writeWide(t *testing.T, r *rand.Rand, path string, rows int, extra bool) {
	t.Helper()
	var b strings.Builder
	for range rows {
		c := r.IntN(3)
		fmt.Fprintf(&b, "%d", c)
		for i := range 40 {
			if i%3 == c && r.Float64() < 0.6 || r.Float64() < 0.1 {
				fmt.Fprintf(&b, " %d:1", uint64(i+1)*25_000_000_000)
			}
		}
		if extra {
			fmt.Fprintf(&b, " %d:1", uint64(1_000_000_000_001))
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSparseIndices: mlr's and nn's tables, scratch and evaluations are
// the data's features, not every index up to the largest: a set whose
// indices reach 10^12 trains as its 40 features do (sized by the largest
// index, a worker asked for 4 TB of scratch; a kdd12-like set took
// 3.2 GB in mlr and more than 20 GB in nn). nn's model file holds the
// features the job's data has, and scores as the job did, a feature only
// the test file has with the table's initial value. mlr's liblinear file,
// a line per index, is refused before training.
func TestSparseIndices(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	dir := t.TempDir()
	train, test := filepath.Join(dir, "train.svm"), filepath.Join(dir, "test.svm")
	writeWide(t, r, train, 600, false)
	writeWide(t, r, test, 200, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := mlr.DefaultConfig()
	cfg.Train, cfg.Test, cfg.Passes, cfg.Model = train, test, 3, filepath.Join(dir, "mlr.model")
	// Refused before the job touches the cluster: no client is needed.
	if _, err := mlr.Run(ctx, nil, cfg); !errors.Is(err, mlr.ErrModelTooWide) || !strings.Contains(err.Error(), "--model") {
		t.Fatalf("mlr --model of indices up to 10^12: %v, want %v naming --model, before training", err, mlr.ErrModelTooWide)
	}
	cfg.Model = ""
	nn := mlr.DefaultNetworkConfig()
	nn.Train, nn.Test, nn.Passes, nn.Hidden, nn.Model = train, test, 3, 8, filepath.Join(dir, "nn.model")
	for _, cfg := range []mlr.Config{cfg, nn} {
		l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 1, Replication: 2})
		if err != nil {
			t.Fatal(err)
		}
		raws, err := l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) { return mlr.Run(ctx, c, cfg) })
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		var rep mlr.Report
		if err := json.Unmarshal(raws[0], &rep); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: test accuracy %.3f, log loss %.3f", rep.App, rep.TestAccuracy, rep.TestLogLoss)
		if rep.TestAccuracy < 0.8 {
			t.Errorf("%s: test accuracy %.3f, want 0.8 or more", rep.App, rep.TestAccuracy)
		}
		if cfg.Model == "" {
			continue
		}
		f, err := os.Open(cfg.Model)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mlr.ReadNetwork(f, cfg.Model)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Features) != 41 || m.Features[40] != 1_000_000_000_001 {
			t.Errorf("the model file has features %v, want the data's 41", m.Features)
		}
		d, err := data.ReadClasses(test)
		if err != nil {
			t.Fatal(err)
		}
		if acc, ll := m.Evaluate(d); acc != rep.TestAccuracy || ll != rep.TestLogLoss {
			t.Errorf("the model file scores accuracy %v, log loss %v; the job %v, %v", acc, ll, rep.TestAccuracy, rep.TestLogLoss)
		}
	}
}
