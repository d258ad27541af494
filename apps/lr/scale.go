package lr

import (
	"math"

	"github.com/terrace-ml/terrace/data"
)

// Scale is MaxAbsScale's factor for each feature of a training set, kept
// for the features the set has (data.NumberKeys), not as an array up to
// its largest index: that was 200 MB a worker on a kdd12-like set of
// 300,000 features with indices up to 50 million (docs/data.md). The zero
// Scale leaves every value as it is.
type Scale struct {
	// features are the training set's features in increasing order;
	// factors[i] is features[i]'s factor.
	features []uint64
	factors  []float32
}

// MaxAbsScale returns, for every feature of train, the factor that brings
// its largest absolute value in train to 1 (1 for a feature never seen
// non-zero). Every worker reads the whole training file, so each computes
// the same factors without a word to the others. Dividing by the maximum
// keeps sparse data sparse and binary features as they are; it makes the
// step size mean the same on pixels of 0-255 as on indicators of 0/1,
// which raw FTRL does not (issue 13: a text corpus of raw counts lost 9
// points of accuracy against liblinear).
func MaxAbsScale(train *data.Sparse) Scale {
	features, local := data.NumberKeys(train)
	maxAbs := make([]float32, len(features))
	for j, li := range local {
		if a := float32(math.Abs(float64(train.Vals[j]))); a > maxAbs[li] {
			maxAbs[li] = a
		}
	}
	for i, m := range maxAbs {
		if m > 0 && !math.IsInf(float64(m), 0) {
			maxAbs[i] = 1 / m
		} else {
			maxAbs[i] = 1
		}
	}
	return Scale{features: features, factors: maxAbs}
}

// Apply multiplies every value of d by its feature's factor, in place;
// features s has none for (unseen in training) are left.
func (s Scale) Apply(d *data.Sparse) {
	if len(s.features) == 0 {
		return
	}
	features, local := data.NumberKeys(d)
	// Both lists increase: one merge finds each of d's features' factor.
	f, i := make([]float32, len(features)), 0
	for j, k := range features {
		for i < len(s.features) && s.features[i] < k {
			i++
		}
		f[j] = 1
		if i < len(s.features) && s.features[i] == k {
			f[j] = s.factors[i]
		}
	}
	for j, li := range local {
		d.Vals[j] *= f[li]
	}
}

// Fold multiplies the weights w, by key (the bias key 0, feature f key
// f+1), by their features' factors, so that a model trained on scaled
// values scores raw ones.
func (s Scale) Fold(w []float32) {
	for i, f := range s.features {
		if k := featureKey(f); k < uint64(len(w)) {
			w[k] *= s.factors[i]
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
