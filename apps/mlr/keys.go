package mlr

import (
	"slices"

	"github.com/terrace-ml/terrace/data"
)

// scoringKeys numbers test's features for an evaluation together with
// the keys also (increasing, the bias first; nil: test's only): it
// returns the keys the evaluation pulls, the bias first, and each of
// test's values' place among them.
func scoringKeys(test *data.Sparse, also []uint64) (keys []uint64, at []int32) {
	f := data.NumberFeatures(test)
	keys, pos := union(also, f.Keys)
	for j, li := range f.Local {
		f.Local[j] = pos[li]
	}
	return keys, f.Local
}

// union merges the increasing keys a and b, and returns b's places in
// the result.
func union(a, b []uint64) (u []uint64, posB []int32) {
	u = make([]uint64, 0, max(len(a), len(b)))
	posB = make([]int32, len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			u = append(u, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			posB[j] = int32(len(u))
			u = append(u, b[j])
			j++
		default:
			posB[j] = int32(len(u))
			u = append(u, a[i])
			i, j = i+1, j+1
		}
	}
	return slices.Clip(u), posB
}

// ModelKeys are the keys of the model of a job trained on train and
// scored on test (nil if it had none): the bias, key 0, and the keys of
// the features either data set has, in increasing order. They are the
// keys the job's evaluation of its last pass pulls and its --model
// writes, so that export reads them too and writes the same file.
func ModelKeys(train, test *data.Sparse) []uint64 {
	keys := data.NumberFeatures(train).Keys
	if test != nil {
		keys, _ = scoringKeys(test, keys)
	}
	return keys
}
