package keyspace

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSlotSetAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func() (SlotSet, map[uint64]bool) {
		var s SlotSet
		m := map[uint64]bool{}
		lo := uint64(rng.IntN(5))
		for range rng.IntN(8) {
			hi := lo + uint64(1+rng.IntN(4))
			s.AddRange(lo, hi)
			for x := lo; x < hi; x++ {
				m[x] = true
			}
			lo = hi + uint64(rng.IntN(4)) // 0 touches the previous run
		}
		return s, m
	}
	for range 2000 {
		a, ma := random()
		b, mb := random()
		u, in, diff := Union(a, b), Intersect(a, b), Subtract(a, b)
		for _, s := range []SlotSet{a, b, u, in, diff} {
			if !s.Valid() {
				t.Fatalf("invalid set %v (from %v and %v)", s, a, b)
			}
		}
		if a.Size() != uint64(len(ma)) || diff.Size() != a.Size()-in.Size() {
			t.Fatalf("sizes: %v holds %d (want %d), %v minus %v %d", a, a.Size(), len(ma), a, b, diff.Size())
		}
		if Overlaps(a, b) != (len(in) > 0) {
			t.Fatalf("Overlaps(%v, %v) = %v, intersection %v", a, b, Overlaps(a, b), in)
		}
		for x := range uint64(60) {
			if a.Contains(x) != ma[x] {
				t.Fatalf("%v contains %d: %v", a, x, a.Contains(x))
			}
			if u.Contains(x) != (ma[x] || mb[x]) {
				t.Fatalf("union %v of %v and %v at %d", u, a, b, x)
			}
			if in.Contains(x) != (ma[x] && mb[x]) {
				t.Fatalf("intersection %v of %v and %v at %d", in, a, b, x)
			}
			if (ma[x] && mb[x]) && !Overlaps(a, b) {
				t.Fatalf("%v and %v share %d, Overlaps says no", a, b, x)
			}
			if diff.Contains(x) != (ma[x] && !mb[x]) {
				t.Fatalf("difference %v of %v and %v at %d", diff, a, b, x)
			}
		}
	}
}

func TestSubtractFromAllSlots(t *testing.T) {
	s := Subtract(AllSlots, SlotSet{0, 3, 10, 11})
	if !slices.Equal(s, SlotSet{3, 10, 11, AllSlots[1]}) {
		t.Fatalf("all slots but [0,3) and 10: %v", s)
	}
	if got := Subtract(s, AllSlots); len(got) != 0 {
		t.Fatalf("nothing left after subtracting everything: %v", got)
	}
}

func TestSlotSetFromKeys(t *testing.T) {
	var s SlotSet
	s.AddKeys([]uint64{0, 5, 63, 64, 200, 1000})
	s.AddKeyRun(1024, 130)
	if want := (SlotSet{0, 2, 3, 4, 15, 19}); !slices.Equal(s, want) {
		t.Fatalf("got %v, want %v", s, want)
	}
	s.Add(2) // out of order
	s.AddRange(30, 31)
	s.AddRange(7, 9)
	if want := (SlotSet{0, 4, 7, 9, 15, 19, 30, 31}); !slices.Equal(s, want) {
		t.Fatalf("got %v, want %v", s, want)
	}
}
