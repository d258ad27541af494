package lasso_test

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

	"github.com/terrace-ml/terrace/apps/lasso"
	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// sparseRegression writes n rows of d features (each present with
// probability 0.1, values normal) whose targets are a weighted sum of the
// first k features plus noise, and returns the file.
func sparseRegression(t *testing.T, n, d, k int) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	var b strings.Builder
	for range n {
		var y float64
		var feats strings.Builder
		for j := range d {
			if rng.Float64() < 0.1 {
				v := rng.NormFloat64()
				if j < k {
					y += v * float64(j%3+1) * (1 - 2*float64(j%2))
				}
				fmt.Fprintf(&feats, " %d:%.5f", j+1, v)
			}
		}
		y += 0.1 * rng.NormFloat64()
		fmt.Fprintf(&b, "%.5f%s\n", y, feats.String())
	}
	path := filepath.Join(t.TempDir(), "reg.svm")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLassoMatchesSerial fits the Lasso with two servers and two workers
// updating disjoint coordinate blocks in parallel, and checks its
// objective against plain serial coordinate descent run to convergence
// (within 1%), that it finds the informative features, and that the
// schedule skipped coordinates that sat at zero.
func TestLassoMatchesSerial(t *testing.T) {
	path := sparseRegression(t, 3000, 300, 15)
	train, err := data.ReadRegression(path)
	if err != nil {
		t.Fatal(err)
	}
	prob := lasso.NewProblem(train)
	lambda := 0.05 * prob.LambdaMax()
	ref, _ := prob.Objective(prob.Serial(lambda, 300), lambda)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 2, Replication: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := lasso.DefaultConfig()
	cfg.Train, cfg.Test, cfg.Passes = path, path, 30
	reps, err := l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) { return lasso.Run(ctx, c, cfg) })
	if err != nil {
		t.Fatal(err)
	}
	var obj float64
	var nz int
	var skipped int64
	for _, raw := range reps {
		var r lasso.Report
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		if r.Objective > 0 {
			obj, nz = r.Objective, r.NonZero
		}
		skipped += r.Skipped
	}
	if obj == 0 || obj > ref*1.01 {
		t.Errorf("objective %.6f after 30 passes; serial coordinate descent converges to %.6f", obj, ref)
	}
	if nz < 15 || nz > 60 {
		t.Errorf("%d nonzero weights; want the 15 informative features and few others", nz)
	}
	if skipped == 0 {
		t.Error("no coordinate skipped: the schedule did nothing")
	}
	t.Logf("objective %.6f (serial %.6f), %d nonzero, %d coordinate visits skipped", obj, ref, nz, skipped)
}

// TestSparseIndices: coordinates are the features the data has, not every
// index up to the largest: a set whose indices reach 10^12 fits as its
// 40 features do (a problem sized by the largest index took 5.6 GB and
// more than 11 minutes a pass at 5*10^7). Its model file, a line per index
// in liblinear's format, is refused before training.
func TestSparseIndices(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	feats := make([]uint64, 40)
	for i := range feats {
		feats[i] = uint64(i+1) * 25_000_000_000 // up to 10^12
	}
	var rows strings.Builder
	for range 500 {
		var y float64
		var line strings.Builder
		for i, f := range feats {
			if rng.Float64() < 0.3 {
				v := rng.NormFloat64()
				if i < 4 {
					y += v * float64(i+1)
				}
				fmt.Fprintf(&line, " %d:%.5f", f, v)
			}
		}
		fmt.Fprintf(&rows, "%.5f%s\n", y+0.05*rng.NormFloat64(), line.String())
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ids.svm")
	if err := os.WriteFile(path, []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	train, err := data.ReadRegression(path)
	if err != nil {
		t.Fatal(err)
	}
	if p := lasso.NewProblem(train); len(p.Keys()) != len(feats) {
		t.Fatalf("%d coordinates, want the data's %d features", len(p.Keys()), len(feats))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := lasso.DefaultConfig()
	cfg.Train, cfg.Test, cfg.Passes, cfg.Model = path, path, 10, filepath.Join(dir, "m.model")
	// Refused before the job touches the cluster: no client is needed.
	if _, err := lasso.Run(ctx, nil, cfg); !errors.Is(err, lasso.ErrModelTooWide) {
		t.Fatalf("--model of indices up to 10^12: %v, want %v before training", err, lasso.ErrModelTooWide)
	}
	cfg.Model = ""
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 1, Replication: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reps, err := l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) { return lasso.Run(ctx, c, cfg) })
	if err != nil {
		t.Fatal(err)
	}
	var r lasso.Report
	if err := json.Unmarshal(reps[0], &r); err != nil {
		t.Fatal(err)
	}
	if r.NonZero < 4 || r.TestRMSE <= 0 || r.TestRMSE > 0.5 {
		t.Errorf("nonzero %d, RMSE %v: the four informative features not learned", r.NonZero, r.TestRMSE)
	}
}
