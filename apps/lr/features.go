package lr

import "github.com/terrace-ml/terrace/data"

// features numbers the distinct features of a training set densely
// (data.NumberKeys), the bias first, so that a worker's scratch space per
// feature is as large as the features the data has, not as its largest
// index.
type features struct {
	// keys[i] is local feature i's parameter key, in increasing order;
	// local 0 is the bias, key 0.
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
