package lr_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// TestJobsOneAfterAnother trains three short jobs back to back on one
// cluster that stays up, each with workers of its own (the same IDs):
// each is accepted once the one before is done, starts from pass 0 with
// its own pieces, ranks, evaluations and tables, and trains every row of
// a9a once a pass (docs/design/jobs.md). The last two are the same BSP
// job, which is repeatable: the third scores as the second did, which it
// would not if it started from the second's weights.
func TestJobsOneAfterAnother(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 2, Replication: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cc := api.NewClient(l.CoordAddr, nil)
	train := filepath.Join("..", "..", "datasets", "a9a", "a9a.gz")
	test := filepath.Join("..", "..", "datasets", "a9a", "a9a.t.gz")
	const rows = 32561
	var last map[string]float64
	for i, run := range []struct {
		passes      int
		consistency table.Consistency
	}{{2, table.Consistency{Model: table.SSP, Staleness: 2}}, {1, table.Consistency{Model: table.BSP}}, {1, table.Consistency{Model: table.BSP}}} {
		passes := run.passes
		j := api.Job{App: "lr", Train: train, Test: test, Passes: passes, Consistency: run.consistency.String()}
		if _, err := cc.SubmitJob(ctx, j); err != nil {
			t.Fatalf("job %d: submit: %v", i+1, err)
		}
		cfg := lr.DefaultConfig()
		cfg.Train, cfg.Test, cfg.Passes, cfg.Consistency = train, test, passes, run.consistency
		reps, err := l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) { return lr.Run(ctx, c, cfg) })
		if err != nil {
			t.Fatalf("job %d: %v", i+1, err)
		}
		var examples int64
		for rank, raw := range reps {
			var rep lr.Report
			if err := json.Unmarshal(raw, &rep); err != nil {
				t.Fatalf("job %d: rank %d's report: %v", i+1, rank, err)
			}
			examples += rep.Examples
		}
		if len(reps) != 2 || examples != int64(passes*rows) {
			t.Fatalf("job %d: %d reports training %d examples, want 2 and %d (%d passes of a9a)", i+1, len(reps), examples, passes*rows, passes)
		}
		st, err := cc.JobStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Number != uint64(i+1) || !st.Done || st.PassesDone != passes || len(st.Results) != passes {
			t.Fatalf("job %d: status number %d done %v passes done %d results %d, want %d passes", i+1, st.Number, st.Done, st.PassesDone, len(st.Results), passes)
		}
		m := st.Results[passes-1].Metrics
		if m["test_accuracy"] < 0.80 {
			t.Fatalf("job %d: test accuracy %.4f after %d passes, want >= 0.80", i+1, m["test_accuracy"], passes)
		}
		t.Logf("job %d: %d passes, %s, test accuracy %.4f logloss %.6f", i+1, passes, run.consistency, m["test_accuracy"], m["test_logloss"])
		if i == 2 && (m["test_accuracy"] != last["test_accuracy"] || m["test_logloss"] != last["test_logloss"]) {
			t.Fatalf("the same BSP job twice: accuracy %.4f then %.4f, logloss %.6f then %.6f: the second did not start afresh",
				last["test_accuracy"], m["test_accuracy"], last["test_logloss"], m["test_logloss"])
		}
		last = m
	}
}
