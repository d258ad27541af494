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

// TestStringIDs trains on Amazon-like ratings, string user and item ids,
// with two workers that each number the ids of the training file on
// their own: they must agree, or each trains the other's users under
// its own keys and the test RMSE stays near the mean's. The exported
// model then scores the test file, its unseen users and items among
// them, to the bit as the job did.
func TestStringIDs(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 4))
	id := func(prefix string, n int) string {
		const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
		b := []byte(prefix)
		for range n {
			b = append(b, alnum[r.IntN(len(alnum))])
		}
		return string(b)
	}
	// A rating is the user's level plus the item's, which the biases
	// learn in a few passes.
	users, items := make([]string, 80), make([]string, 50)
	level := map[string]float64{}
	for i := range users {
		users[i] = id("A", 13)
		level[users[i]] = float64(r.IntN(3))
	}
	for i := range items {
		items[i] = id("B0", 8)
		level[items[i]] = float64(1 + r.IntN(3))
	}
	var train, test strings.Builder
	for _, u := range users {
		for _, it := range items {
			line := fmt.Sprintf("%s,%s,%.1f,%d\n", u, it, level[u]+level[it], 1365811200+r.IntN(1e7))
			if r.IntN(5) == 0 {
				test.WriteString(line)
			} else {
				train.WriteString(line)
			}
		}
	}
	// Users and items the training never saw.
	fmt.Fprintf(&test, "ANEWUSER00000,%s,3.0,1\n%s,B0NEWITEM0,2.0,1\nANEWUSER00000,B0NEWITEM0,4.0,1\n", items[0], users[0])
	cfg := mf.DefaultConfig()
	cfg.Train, cfg.Test, cfg.Model = filepath.Join(dir, "train.csv"), filepath.Join(dir, "test.csv"), filepath.Join(dir, "model")
	cfg.Passes, cfg.Rank, cfg.LR = 8, 4, 0.05
	files := map[string]string{cfg.Train: train.String(), cfg.Test: test.String()}
	run := func(workers int) float64 { return runJob(t, cfg, files, 2, workers) }
	// Predicting the training mean everywhere scores about 1.1.
	if rmse := run(2); rmse == 0 || rmse > 0.5 {
		t.Errorf("test RMSE %.3f with two workers, want at most 0.5: did they number the ids alike?", rmse)
	}
	// One worker, whose last pass's evaluation and export read the same
	// values: with two, the evaluation's pull and the export's are two
	// reads, which may see the other worker's last pushes differently.
	rmse := run(1)

	m, err := mf.LoadModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	if m.UserIDs == nil || m.UserIDs.Len() != len(users) || m.ItemIDs == nil || m.ItemIDs.Len() != len(items) {
		t.Fatalf("the model's dictionaries: %v, %v; want %d users and %d items", m.UserIDs, m.ItemIDs, len(users), len(items))
	}
	rs, err := data.ReadRatingsWith(cfg.Test, m.UserIDs, m.ItemIDs)
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
	// The unseen user and item count with bias and factors 0.
	n := rs.Len()
	u0, _ := m.UserIDs.Lookup([]byte(users[0]))
	if rs.Users[n-1] != data.Unseen || rs.Items[n-1] != data.Unseen || pred[n-1] != m.Mean ||
		pred[n-2] != float64(float32(m.Mean)+m.Users[u0][0]) {
		t.Errorf("unseen: numbers %d, %d, predictions %v, %v; want Unseen, the mean %v and the mean plus the user's bias",
			rs.Users[n-1], rs.Items[n-1], pred[n-1], pred[n-2], m.Mean)
	}
	t.Logf("test RMSE %.4f", rmse)
}
