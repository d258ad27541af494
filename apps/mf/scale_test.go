package mf_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/apps/mf"
)

// TestRatingScale trains on ratings of a 1-10 scale, all from 7 up (the
// scale of Book-Crossing; Jester's is -10 to 10, MovieLens 20M's 0.5 to
// 5): the test RMSE and the exported model's predictions are clipped to
// the training ratings' range. Clipped to MovieLens 100K's 1-5, every
// prediction was 5 and the RMSE above 2.
func TestRatingScale(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	var train, test strings.Builder
	train.WriteString("user,item,rating\n")
	for u := 1; u <= 60; u++ {
		for it := 1; it <= 40; it++ {
			line := fmt.Sprintf("%d,%d,%d\n", u, it, 7+(u+it)%4)
			if r.IntN(5) == 0 {
				test.WriteString(line)
			} else {
				train.WriteString(line)
			}
		}
	}
	cfg := mf.DefaultConfig()
	cfg.Train, cfg.Test, cfg.Passes, cfg.Rank = filepath.Join(dir, "train.csv"), filepath.Join(dir, "test.csv"), 2, 4
	cfg.Model = filepath.Join(dir, "model")
	rmse := runJob(t, cfg, map[string]string{cfg.Train: train.String(), cfg.Test: test.String()}, 1, 1)
	// Predicting the mean, 8.5, everywhere scores 1.12; clipped to 5, 3.67.
	if rmse > 1.5 {
		t.Errorf("test RMSE %.3f on ratings 7-10, want at most 1.5", rmse)
	}
	m, err := mf.LoadModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	if m.Min != 7 || m.Max != 10 {
		t.Errorf("model's range %v-%v, want 7-10", m.Min, m.Max)
	}
	if p := m.Predict(1, 2); p < 7 || p > 10 {
		t.Errorf("Predict(1, 2) = %v, want within 7-10", p)
	}
	t.Logf("test RMSE %.3f", rmse)
}
