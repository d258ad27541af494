package lr

import (
	"math"

	"github.com/terrace-ml/terrace/data"
)

// MaxAbsScale returns, for every feature of train, the factor that brings
// its largest absolute value in train to 1 (1 for a feature never seen
// non-zero). Every worker reads the whole training file, so each computes
// the same factors without a word to the others. Dividing by the maximum
// keeps sparse data sparse and binary features as they are; it makes the
// step size mean the same on pixels of 0-255 as on indicators of 0/1,
// which raw FTRL does not (issue 13: a text corpus of raw counts lost 9
// points of accuracy against liblinear).
func MaxAbsScale(train *data.Sparse, nkeys uint64) []float32 {
	maxAbs := make([]float32, nkeys)
	for i, k := range train.Keys {
		if a := float32(math.Abs(float64(train.Vals[i]))); a > maxAbs[featureKey(k)] {
			maxAbs[featureKey(k)] = a
		}
	}
	s := maxAbs
	for k, m := range maxAbs {
		if m > 0 && !math.IsInf(float64(m), 0) {
			s[k] = 1 / m
		} else {
			s[k] = 1
		}
	}
	s[0] = 1 // the bias
	return s
}

// ApplyScale multiplies every value of d by its feature's factor, in
// place; features beyond the factors (unseen in training) are left.
func ApplyScale(d *data.Sparse, s []float32) {
	for i, k := range d.Keys {
		if fk := featureKey(k); fk < uint64(len(s)) {
			d.Vals[i] *= s[fk]
		}
	}
}

// AutoBatch is the default minibatch for rows training examples: 100, but
// small enough that a small data set still makes a few hundred updates a
// pass (at least 10 examples): ten passes of four minibatches left a
// 400-row set far from converged.
func AutoBatch(rows int) int {
	return min(100, max(10, rows/400))
}
