package mf_test

import (
	"context"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/apps/mf"
	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// TestMovieLensRMSE trains on MovieLens 100K u1.base with two servers
// (k = 2) and two workers and checks the test RMSE target of 0.94.
func TestMovieLensRMSE(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 30 passes")
	}
	train, ok := data.SharedPath("ratings/ml-100k/u1.base")
	test, ok2 := data.SharedPath("ratings/ml-100k/u1.test")
	if !ok || !ok2 {
		t.Skip("MovieLens 100K not found under ../shared/data/ratings/ml-100k (its licence keeps it out of the repository)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 2, Replication: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := mf.DefaultConfig()
	cfg.Train, cfg.Test = train, test
	var rmse float64
	_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		rep, err := mf.Run(ctx, c, cfg)
		if err == nil && c.Rank() == 0 {
			rmse = rep.TestRMSE
		}
		return rep, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if rmse == 0 || rmse > 0.94 {
		t.Fatalf("test RMSE %.4f, want <= 0.94", rmse)
	}
	t.Logf("test RMSE %.4f", rmse)
}
