package keyspace

import "sort"

// SlotSet is a set of slots as sorted, disjoint, non-adjacent half-open runs,
// flattened: [lo0, hi0, lo1, hi1, ...]. The zero value is empty.
type SlotSet []uint64

// AddRange adds the slots [lo, hi): cheaply when runs come in increasing
// order of lo, as they do from sorted keys.
func (s *SlotSet) AddRange(lo, hi uint64) {
	if hi <= lo {
		return
	}
	n := len(*s)
	switch {
	case n == 0 || lo > (*s)[n-1]:
		*s = append(*s, lo, hi)
	case lo >= (*s)[n-2]:
		(*s)[n-1] = max((*s)[n-1], hi)
	default:
		*s = Union(*s, SlotSet{lo, hi})
	}
}

// Add adds one slot.
func (s *SlotSet) Add(slot uint64) { s.AddRange(slot, slot+1) }

// AddKeys adds the slots of sorted keys.
func (s *SlotSet) AddKeys(keys []uint64) {
	for _, k := range keys {
		s.Add(Slot(k))
	}
}

// AddKeyRun adds the slots of the n keys from lo.
func (s *SlotSet) AddKeyRun(lo uint64, n int) {
	if n > 0 {
		s.AddRange(Slot(lo), Slot(lo+uint64(n)-1)+1)
	}
}

// Contains reports whether slot is in s.
func (s SlotSet) Contains(slot uint64) bool {
	runs := len(s) / 2
	i := sort.Search(runs, func(i int) bool { return s[2*i+1] > slot })
	return i < runs && s[2*i] <= slot
}

// Valid reports whether s is well formed: sorted, disjoint, non-empty runs.
func (s SlotSet) Valid() bool {
	if len(s)%2 != 0 {
		return false
	}
	for i := 0; i < len(s); i += 2 {
		if s[i] >= s[i+1] || (i > 0 && s[i] <= s[i-1]) {
			return false
		}
	}
	return true
}

// Union returns the slots in a or b.
func Union(a, b SlotSet) SlotSet {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make(SlotSet, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j >= len(b) || (i < len(a) && a[i] <= b[j]) {
			out.AddRange(a[i], a[i+1]) // in order: the fast cases
			i += 2
		} else {
			out.AddRange(b[j], b[j+1])
			j += 2
		}
	}
	return out
}

// Intersect returns the slots in both a and b.
func Intersect(a, b SlotSet) SlotSet {
	var out SlotSet
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		lo, hi := max(a[i], b[j]), min(a[i+1], b[j+1])
		if lo < hi {
			out.AddRange(lo, hi)
		}
		if a[i+1] < b[j+1] {
			i += 2
		} else {
			j += 2
		}
	}
	return out
}

// AllSlots is every slot.
var AllSlots = SlotSet{0, 1 << (64 - SlotBits)}

// Overlaps reports whether a and b have a slot in common.
func Overlaps(a, b SlotSet) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if max(a[i], b[j]) < min(a[i+1], b[j+1]) {
			return true
		}
		if a[i+1] < b[j+1] {
			i += 2
		} else {
			j += 2
		}
	}
	return false
}

// Subtract returns the slots in a but not in b.
func Subtract(a, b SlotSet) SlotSet {
	out := make(SlotSet, 0, len(a)+len(b))
	j := 0
	for i := 0; i < len(a); i += 2 {
		lo, hi := a[i], a[i+1]
		for j < len(b) && b[j+1] <= lo {
			j += 2
		}
		for k := j; k < len(b) && b[k] < hi; k += 2 {
			if b[k] > lo {
				out.AddRange(lo, b[k])
			}
			lo = max(lo, b[k+1])
		}
		out.AddRange(lo, hi)
	}
	return out
}

// Size is how many slots s holds.
func (s SlotSet) Size() uint64 {
	var n uint64
	for i := 0; i+1 < len(s); i += 2 {
		n += s[i+1] - s[i]
	}
	return n
}
