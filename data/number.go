package data

import "slices"

// NumberKeys numbers the distinct keys (feature indices) of d densely: it
// returns them in increasing order, and for each stored value of d
// (d.Keys[j]) the number of its key. A worker's scratch space per feature
// is then as large as the features the data has, not as its largest
// index: kdd12's indices reach 54 million and hashed features 2^32, and a
// 20,000-row set of indices up to 50 million took 3.3 GB in lr's arrays
// (docs/data.md, twelfth session).
func NumberKeys(d *Sparse) (keys []uint64, local []int32) {
	if d.NumFeatures <= 4*uint64(len(d.Keys))+denseSlack {
		return numberByTable(d)
	}
	return numberBySorting(d)
}

// denseSlack lets small data number its keys by table whatever its
// indices.
const denseSlack = 1 << 16

// numberByTable numbers d's keys with a table of d.NumFeatures entries,
// which NumberKeys allows when that is at most a few times d's stored
// values: it is then linear, and 3 to 5 times faster than sorting on an
// rcv1-like set of 5 million values.
func numberByTable(d *Sparse) ([]uint64, []int32) {
	num := make([]int32, d.NumFeatures) // a key's number + 1; 0: absent
	for _, k := range d.Keys {
		num[k] = 1
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
		local[j] = num[k] - 1
	}
	return slices.Clip(keys), local
}

// numberBySorting numbers d's keys in memory proportional to d's stored
// values, whatever its indices.
func numberBySorting(d *Sparse) ([]uint64, []int32) {
	keys := slices.Clone(d.Keys)
	slices.Sort(keys)
	keys = slices.Clip(slices.Compact(keys))
	local := make([]int32, len(d.Keys))
	for j, k := range d.Keys {
		i, _ := slices.BinarySearch(keys, k)
		local[j] = int32(i)
	}
	return keys, local
}

// Features are a data set's distinct features numbered after a bias, as
// lr and mlr key their weights: Keys[0] is the bias's key, 0, and Keys[i]
// (i ≥ 1) a feature's index plus one, in increasing order; Local[j] is
// the number of d.Keys[j] (from 1). A worker's scratch space and an
// evaluation's pull are then as large as the features the data has, not
// as its largest index.
type Features struct {
	Keys  []uint64
	Local []int32
}

// NumberFeatures numbers d's features after the bias (NumberKeys).
func NumberFeatures(d *Sparse) Features {
	keys, local := NumberKeys(d)
	f := Features{Keys: make([]uint64, len(keys)+1), Local: local}
	for i, k := range keys {
		f.Keys[i+1] = k + 1
	}
	for j := range local {
		local[j]++ // local 0 is the bias
	}
	return f
}
