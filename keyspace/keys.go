package keyspace

import (
	"iter"
	"slices"
)

// Keys is a set of keys, held as a sorted list of keys or as sorted,
// disjoint runs of consecutive keys: the two forms in which a message names
// its keys. The zero value is empty. Every walk over a set's keys slot by
// slot goes through Spans, so that both forms are cut at slot boundaries in
// one place.
type Keys struct {
	list []uint64
	runs []Range
	n    int
}

// KeyList returns the set of keys, which must be sorted and unique
// (CheckSorted). The set refers to keys, not a copy.
func KeyList(keys []uint64) Keys { return Keys{list: keys, n: len(keys)} }

// KeyRun returns the set of the n keys from lo.
func KeyRun(lo uint64, n int) Keys {
	var k Keys
	k.AddRun(lo, lo+uint64(n))
	return k
}

// AddRun adds the keys [lo, hi) to a set of runs; they must follow its
// last run. A run that continues the last one extends it.
func (k *Keys) AddRun(lo, hi uint64) {
	if hi <= lo {
		return
	}
	if m := len(k.runs); m > 0 && k.runs[m-1].Hi == lo {
		k.runs[m-1].Hi = hi
	} else {
		k.runs = append(k.runs, Range{lo, hi})
	}
	k.n += int(hi - lo)
}

// Add adds the keys of span, which must follow those of k, in span's form:
// a list span to a list, a run span to runs.
func (k *Keys) Add(span Span) {
	if span.List != nil {
		k.list = append(k.list, span.List...)
		k.n += len(span.List)
		return
	}
	k.AddRun(span.Lo, span.Lo+uint64(span.N))
}

// Len returns the number of keys in k.
func (k Keys) Len() int { return k.n }

// IsRuns reports whether k is held as runs (and List is nil).
func (k Keys) IsRuns() bool { return k.runs != nil }

// List returns the keys of a set held as a list (nil for runs).
func (k Keys) List() []uint64 { return k.list }

// Runs returns the runs of a set held as runs (nil for a list).
func (k Keys) Runs() []Range { return k.runs }

// Clone returns a copy of k that shares no memory with it.
func (k Keys) Clone() Keys {
	return Keys{list: slices.Clone(k.list), runs: slices.Clone(k.runs), n: k.n}
}

// Span is the keys of a set that fall in one slot: a piece of its list,
// or one run.
type Span struct {
	Slot uint64
	// At is the position of the span's first key in the whole set (its
	// values start at At × width).
	At int
	// List holds the span's keys when the set is a list; nil for a run.
	List []uint64
	// Lo and N are the span's run, [Lo, Lo+N), when List is nil.
	Lo uint64
	N  int
}

// Len returns the number of keys in s.
func (s Span) Len() int {
	if s.List != nil {
		return len(s.List)
	}
	return s.N
}

// Key returns the span's ith key.
func (s Span) Key(i int) uint64 {
	if s.List != nil {
		return s.List[i]
	}
	return s.Lo + uint64(i)
}

// Bits returns the span's keys as a bitmap of their offsets in the slot.
func (s Span) Bits() uint64 {
	if s.List == nil {
		if s.N == SlotSize {
			return ^uint64(0)
		}
		return (uint64(1)<<s.N - 1) << (s.Lo - SlotStart(s.Slot))
	}
	var b uint64
	for _, k := range s.List {
		b |= 1 << (k % SlotSize)
	}
	return b
}

// Spans returns k's keys slot by slot, in increasing order: the one slot
// iterator of the key space. It allocates nothing.
func (k Keys) Spans() iter.Seq[Span] {
	return func(yield func(Span) bool) {
		if k.runs == nil {
			for i := 0; i < len(k.list); {
				sl := Slot(k.list[i])
				j := i + 1
				for j < len(k.list) && Slot(k.list[j]) == sl {
					j++
				}
				if !yield(Span{Slot: sl, At: i, List: k.list[i:j:j]}) {
					return
				}
				i = j
			}
			return
		}
		at := 0
		for _, r := range k.runs {
			for lo := r.Lo; lo < r.Hi; {
				sl := Slot(lo)
				hi := min(r.Hi, SlotStart(sl+1))
				if hi == 0 { // the last slot of the key space
					hi = r.Hi
				}
				if !yield(Span{Slot: sl, At: at, Lo: lo, N: int(hi - lo)}) {
					return
				}
				at += int(hi - lo)
				lo = hi
			}
		}
	}
}

// Slots returns the slots of k's keys.
func (k Keys) Slots() SlotSet {
	var s SlotSet
	for sp := range k.Spans() {
		s.Add(sp.Slot)
	}
	return s
}
