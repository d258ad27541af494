package data

import (
	"math"
	"strconv"
	"unsafe"
)

// parseUint parses a decimal integer of at most max, digits only: no sign,
// no spaces, no underscores. ok is false for anything else; tooBig says the
// digits were fine but the value exceeds max.
func parseUint(b []byte, max uint64) (v uint64, ok, tooBig bool) {
	if len(b) == 0 {
		return 0, false, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false, false
		}
		d := uint64(c - '0')
		if v > (max-d)/10 {
			tooBig = true
			continue // keep scanning so that "99999x" still reads as not an integer
		}
		v = v*10 + d
	}
	if tooBig {
		return 0, false, true
	}
	return v, true, false
}

// parseFloat32 parses a finite float32. Small integers, which is what binary
// features such as a9a's "1" are, take a fast path that is exact.
func parseFloat32(b []byte) (f float32, reason string) {
	if n := len(b); n > 0 && n <= 7 {
		var v int32
		i := 0
		for ; i < n && b[i] >= '0' && b[i] <= '9'; i++ {
			v = v*10 + int32(b[i]-'0')
		}
		if i == n {
			return float32(v), ""
		}
	}
	if len(b) == 0 {
		return 0, "is empty"
	}
	// The string aliases the line buffer only for the duration of the call:
	// the *NumError that would keep it is dropped here, so no copy is needed.
	x, err := strconv.ParseFloat(unsafe.String(&b[0], len(b)), 32)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, "is out of float32 range"
		}
		return 0, "is not a number"
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, "is not finite"
	}
	return float32(x), ""
}
