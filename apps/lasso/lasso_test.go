package lasso_test

import (
	"context"
	"encoding/json"
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
