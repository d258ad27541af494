package ps

import (
	"math"
	"slices"
	"sync"
)

// Filter decides, on the worker, what part of a push to send now. What it
// holds back it must keep and send later (Flusher), never drop.
type Filter interface {
	// Filter returns the keys and values to push now; it may return its
	// arguments unchanged, or new slices.
	Filter(keys []uint64, vals []float32, width int) ([]uint64, []float32)
}

// Flusher is a Filter that holds values back and can release them all.
type Flusher interface {
	Flush(width int) (keys []uint64, vals []float32)
}

// SignificanceFilter is the PS paper's significantly-modified filter: a
// key's update is accumulated locally and pushed only once some coordinate
// of the accumulated change exceeds Threshold in magnitude.
type SignificanceFilter struct {
	Threshold float32

	mu    sync.Mutex
	resid map[uint64][]float32
}

// NewSignificanceFilter returns a filter with the given threshold.
func NewSignificanceFilter(threshold float32) *SignificanceFilter {
	return &SignificanceFilter{Threshold: threshold, resid: make(map[uint64][]float32)}
}

// Filter implements Filter.
func (f *SignificanceFilter) Filter(keys []uint64, vals []float32, w int) ([]uint64, []float32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var outK []uint64
	var outV []float32
	for i, k := range keys {
		acc := f.resid[k]
		v := vals[i*w : (i+1)*w]
		if acc == nil {
			acc = make([]float32, w)
		}
		big := false
		for j := range acc {
			acc[j] += v[j]
			if float32(math.Abs(float64(acc[j]))) > f.Threshold {
				big = true
			}
		}
		if big {
			outK = append(outK, k)
			outV = append(outV, acc...)
			delete(f.resid, k)
		} else {
			f.resid[k] = acc
		}
	}
	return outK, outV
}

// Flush implements Flusher: it returns every held-back change, sorted by key.
func (f *SignificanceFilter) Flush(w int) ([]uint64, []float32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]uint64, 0, len(f.resid))
	for k := range f.resid {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	vals := make([]float32, 0, len(keys)*w)
	for _, k := range keys {
		vals = append(vals, f.resid[k]...)
	}
	clear(f.resid)
	return keys, vals
}
