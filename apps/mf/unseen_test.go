package mf_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/apps/mf"
	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/metrics"
)

// TestUnseenNumbersScoreAsExported: in a column of numbers, a test user
// or item training never had scores with no factors and no bias in the
// job's evaluation, as in the exported model, so that predict gives the
// job's test RMSE to the bit. Before, the job read such an id's key,
// whose factors are the table's random initial values.
func TestUnseenNumbersScoreAsExported(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(5, 6))
	var train, test strings.Builder
	for u := 1; u <= 30; u++ {
		for it := 1; it <= 40; it++ {
			line := fmt.Sprintf("%d\t%d\t%d\t%d\n", u, it, 1+(u+it)%5, 874965758+r.IntN(1e6))
			if r.IntN(5) == 0 {
				test.WriteString(line)
			} else {
				train.WriteString(line)
			}
		}
	}
	// Ids above training's, and one below its largest that it lacks.
	fmt.Fprintf(&test, "31\t3\t4\t874965758\n5\t41\t2\t874965758\n31\t41\t5\t874965758\n1000\t7\t1\t874965758\n")
	cfg := mf.DefaultConfig()
	cfg.Train, cfg.Test, cfg.Model = filepath.Join(dir, "u.base"), filepath.Join(dir, "u.test"), filepath.Join(dir, "model")
	cfg.Passes, cfg.Rank = 3, 8
	rmse := runJob(t, cfg, map[string]string{cfg.Train: train.String(), cfg.Test: test.String()}, 1, 1)
	m, err := mf.LoadModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := data.ReadRatings(cfg.Test)
	if err != nil {
		t.Fatal(err)
	}
	pred, truth := make([]float64, rs.Len()), make([]float64, rs.Len())
	for i := range pred {
		pred[i], truth[i] = m.Predict(rs.Users[i], rs.Items[i]), float64(rs.Values[i])
	}
	if got := metrics.RMSE(pred, truth); got != rmse {
		t.Errorf("the exported model scores the test file %v, the job %v", got, rmse)
	}
	if n := rs.Len(); pred[n-2] != m.Mean && pred[n-2] != float64(float32(m.Mean)) {
		t.Errorf("an unseen user and item predicted %v, want the mean %v", pred[n-2], m.Mean)
	}
}
