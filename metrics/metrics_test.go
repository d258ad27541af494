package metrics

import (
	"math"
	"math/rand/v2"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestAccuracy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels []float32
		probs  []float64
		want   float64
	}{
		{"all right", []float32{0, 1, 1}, []float64{0.1, 0.9, 0.51}, 1},
		{"all wrong", []float32{0, 1}, []float64{0.9, 0.1}, 0},
		{"half is negative", []float32{0, 1}, []float64{0.5, 0.5}, 0.5},
		{"minus one labels", []float32{-1, 1, -1, 1}, []float64{0.2, 0.7, 0.6, 0.8}, 0.75},
		{"no examples", nil, nil, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Accuracy(tc.labels, tc.probs); got != tc.want && !(math.IsNaN(got) && math.IsNaN(tc.want)) {
				t.Errorf("Accuracy = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLogLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels []float64
		probs  []float64
		want   float64
	}{
		{"perfect", []float64{0, 1, 1, 0}, []float64{0, 1, 1, 0}, 1e-15},
		{"coin flip", []float64{0, 1}, []float64{0.5, 0.5}, math.Ln2},
		{"known values", []float64{1, 0}, []float64{0.8, 0.4}, -(math.Log(0.8) + math.Log(0.6)) / 2},
		{"confident mistake is clipped", []float64{1}, []float64{0}, -math.Log(1e-15)},
		// 1-1e-15 is not exact in float64, hence not quite the same loss.
		{"confident mistake on a negative", []float64{0}, []float64{1}, -math.Log1p(-(1 - 1e-15))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LogLoss(tc.labels, tc.probs)
			if math.IsInf(got, 0) || math.IsNaN(got) || !near(got, tc.want, 1e-6*max(1, tc.want)) {
				t.Errorf("LogLoss = %v, want %v", got, tc.want)
			}
		})
	}
	if got := LogLoss([]float32{1, 0}, []float64{1, 0}); got < 0 || got > 1e-12 {
		t.Errorf("LogLoss of perfect predictions = %v, want about 0", got)
	}
	if got := LogLoss[float32](nil, nil); !math.IsNaN(got) {
		t.Errorf("LogLoss of nothing = %v, want NaN", got)
	}
}

func TestAUCKnown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels []float64
		scores []float64
		want   float64
	}{
		{"perfect", []float64{0, 0, 1, 1}, []float64{0.1, 0.2, 0.8, 0.9}, 1},
		{"reversed", []float64{1, 1, 0, 0}, []float64{0.1, 0.2, 0.8, 0.9}, 0},
		{"textbook", []float64{0, 0, 1, 1}, []float64{0.1, 0.4, 0.35, 0.8}, 0.75},
		{"all tied", []float64{0, 1, 0, 1, 1}, []float64{3, 3, 3, 3, 3}, 0.5},
		{"one tie across classes", []float64{0, 1, 0}, []float64{1, 1, 0}, 0.75},
		{"unsorted with ties", []float64{1, 0, 1, 0, 1, 0}, []float64{2, 2, 5, 1, 2, 3},
			// positives 2, 5, 2 against negatives 2, 1, 3
			((0.5 + 1 + 0) + (1 + 1 + 1) + (0.5 + 1 + 0)) / 9},
		{"minus one labels", []float64{-1, 1}, []float64{0.3, 0.7}, 1},
		{"NaN ranks lowest", []float64{0, 1}, []float64{math.NaN(), 0}, 1},
		{"only positives", []float64{1, 1}, []float64{0.2, 0.9}, 0.5},
		{"only negatives", []float64{0, 0, 0}, []float64{0.2, 0.9, 0.1}, 0.5},
		{"no examples", nil, nil, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AUC(tc.labels, tc.scores); !near(got, tc.want, 1e-15) {
				t.Errorf("AUC = %v, want %v", got, tc.want)
			}
		})
	}
}

// bruteAUC counts every positive-negative pair.
func bruteAUC(labels []float32, scores []float64) float64 {
	var wins, pairs float64
	for i, li := range labels {
		if li != 1 {
			continue
		}
		for j, lj := range labels {
			if lj != 0 {
				continue
			}
			pairs++
			switch {
			case scores[i] > scores[j]:
				wins++
			case scores[i] == scores[j]:
				wins += 0.5
			}
		}
	}
	return wins / pairs
}

func TestAUCAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 2 + rng.IntN(300)
		levels := 1 + rng.IntN(20) // few distinct scores: many ties
		labels := make([]float32, n)
		scores := make([]float64, n)
		for i := range n {
			labels[i] = float32(rng.IntN(2))
			scores[i] = float64(rng.IntN(levels)) / float64(levels)
			if labels[i] == 1 { // make the scores informative, so AUC is not always near 0.5
				scores[i] += 0.3 * rng.Float64()
				scores[i] = math.Round(scores[i]*float64(levels)) / float64(levels)
			}
		}
		labels[0], labels[1] = 0, 1 // both classes present
		want := bruteAUC(labels, scores)
		if got := AUC(labels, scores); !near(got, want, 1e-12) {
			t.Fatalf("trial %d (n=%d, %d levels): AUC = %v, brute force %v", trial, n, levels, got, want)
		}
	}
}

func TestRMSE(t *testing.T) {
	if got := RMSE([]float64{1, 2, 3}, []float64{1, 2, 3}); got != 0 {
		t.Errorf("RMSE of exact predictions = %v", got)
	}
	if got := RMSE([]float64{1, 4}, []float64{2, 2}); !near(got, math.Sqrt(2.5), 1e-15) {
		t.Errorf("RMSE = %v, want sqrt(2.5)", got)
	}
	if got := RMSE([]float64{3.5, 3.5, 3.5, 3.5}, []float64{1, 2, 5, 6}); !near(got, math.Sqrt((6.25+2.25+2.25+6.25)/4), 1e-15) {
		t.Errorf("RMSE = %v", got)
	}
	if got := RMSE(nil, nil); !math.IsNaN(got) {
		t.Errorf("RMSE of nothing = %v, want NaN", got)
	}
}

func TestLengthMismatchPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"Accuracy": func() { Accuracy([]float32{1}, []float64{0.5, 0.5}) },
		"LogLoss":  func() { LogLoss([]float32{1, 0}, []float64{0.5}) },
		"AUC":      func() { AUC([]float64{1, 0}, nil) },
		"RMSE":     func() { RMSE([]float64{1}, []float64{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with mismatched lengths did not panic", name)
				}
			}()
			f()
		}()
	}
}
