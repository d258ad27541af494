package mlr

import (
	"slices"

	"github.com/terrace-ml/terrace/data"
)

// features numbers the distinct features of a data set densely
// (data.NumberKeys), the bias first, so that a worker's scratch space
// and an evaluation's pull are as large as the features the data has,
// not as its largest index: kdd12-like data (indices up to 50 million,
// 300,000 features) took 3.2 GB in mlr and more than 20 GB in nn's
// evaluation (docs/design/mlr.md, thirteenth session).
type features struct {
	// keys[i] is local feature i's key, in increasing order; local 0 is
	// the bias, key 0.
	keys []uint64
	// local[j] is the local number of d.Keys[j].
	local []int32
}

func numberFeatures(d *data.Sparse) features {
	keys, local := data.NumberKeys(d)
	f := features{keys: make([]uint64, len(keys)+1), local: local}
	for i, k := range keys {
		f.keys[i+1] = featureKey(k)
	}
	for j := range local {
		local[j]++ // local 0 is the bias
	}
	return f
}

// scoringKeys numbers test's features for an evaluation together with
// the keys also (increasing, the bias first; nil: test's only): it
// returns the keys the evaluation pulls, the bias first, and each of
// test's values' place among them.
func scoringKeys(test *data.Sparse, also []uint64) (keys []uint64, at []int32) {
	f := numberFeatures(test)
	keys, pos := union(also, f.keys)
	for j, li := range f.local {
		f.local[j] = pos[li]
	}
	return keys, f.local
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
	keys := numberFeatures(train).keys
	if test != nil {
		keys, _ = scoringKeys(test, keys)
	}
	return keys
}
