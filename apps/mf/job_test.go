package mf_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/apps/mf"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// runJob writes files (path to body: the training and test ratings cfg
// names), runs cfg on a local cluster of servers (one copy each) and
// workers, and returns rank 0's test RMSE.
func runJob(t *testing.T, cfg mf.Config, files map[string]string, servers, workers int) float64 {
	t.Helper()
	for path, body := range files {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: servers, Workers: workers, Replication: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var rmse float64
	if _, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		rep, err := mf.Run(ctx, c, cfg)
		if err == nil && c.Rank() == 0 {
			rmse = rep.TestRMSE
		}
		return rep, err
	}); err != nil {
		t.Fatal(err)
	}
	return rmse
}
