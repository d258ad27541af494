package lr

import (
	"slices"

	"github.com/terrace-ml/terrace/data"
)

// features numbers the distinct features of a training set densely, so
// that a worker's scratch space per feature is as large as the features
// the data has, not as its largest index: kdd12's indices reach 54
// million and hashed features 2^32, and a 20,000-row set of indices up
// to 50 million took 3.3 GB in every worker's arrays and the servers'
// keys (docs/data.md, twelfth session).
type features struct {
	// keys[i] is local feature i's parameter key, in increasing order;
	// local 0 is the bias, key 0.
	keys []uint64
	// local[j] is the local number of d.Keys[j].
	local []int32
}

func numberFeatures(d *data.Sparse) features {
	if n := featureKey(d.NumFeatures); n <= 4*uint64(len(d.Keys))+denseSlack {
		return numberByTable(d, n)
	}
	return numberBySorting(d)
}

// denseSlack lets small data number its features by table whatever its
// indices.
const denseSlack = 1 << 16

// numberByTable numbers d's features with a table of n = the largest key
// + 1 entries, which numberFeatures allows when n is at most a few times
// d's stored values: it is then linear, and 3 to 5 times faster than
// sorting on an rcv1-like set of 5 million values.
func numberByTable(d *data.Sparse, n uint64) features {
	num := make([]int32, n) // a key's number + 1; 0: absent
	num[0] = 1
	for _, k := range d.Keys {
		num[featureKey(k)] = 1
	}
	var keys []uint64
	for k, seen := range num {
		if seen != 0 {
			keys = append(keys, uint64(k))
			num[k] = int32(len(keys))
		}
	}
	local := make([]int32, len(d.Keys))
	for j, k := range d.Keys {
		local[j] = num[featureKey(k)] - 1
	}
	return features{keys: slices.Clip(keys), local: local}
}

// numberBySorting numbers d's features in memory proportional to d's
// stored values, whatever its indices.
func numberBySorting(d *data.Sparse) features {
	keys := make([]uint64, 0, len(d.Keys)+1)
	keys = append(keys, 0)
	for _, k := range d.Keys {
		keys = append(keys, featureKey(k))
	}
	slices.Sort(keys)
	keys = slices.Clip(slices.Compact(keys))
	local := make([]int32, len(d.Keys))
	for j, k := range d.Keys {
		i, _ := slices.BinarySearch(keys, featureKey(k))
		local[j] = int32(i)
	}
	return features{keys: keys, local: local}
}
