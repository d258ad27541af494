package store

import (
	"math/rand/v2"
	"testing"
)

// TestSlotMapMatchesMap drives a slotMap and a Go map with the same random
// sets and deletes, on few enough distinct slots that runs collide, wrap
// around the end and are cut by deletes, and checks every slot after each
// step.
func TestSlotMapMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var m slotMap
	want := map[uint64]block{}
	var dummy [1]float32
	for step := range 20_000 {
		// A stripe's slots share bits 4 to 11; keep that shape.
		slot := uint64(rng.IntN(600))<<12 | 0x50 | uint64(rng.IntN(16))
		if rng.IntN(3) == 0 {
			m.del(slot)
			delete(want, slot)
		} else {
			b := block{bits: rng.Uint64() | 1, p: &dummy[0]}
			m.set(slot, b)
			want[slot] = b
		}
		if m.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, m.len(), len(want))
		}
		if step%97 != 0 {
			continue
		}
		for s, b := range want {
			if got := m.get(s); got != b {
				t.Fatalf("step %d: slot %#x holds %v, want %v", step, s, got, b)
			}
		}
		n := 0
		for s, b := range m.all() {
			if want[s] != b {
				t.Fatalf("step %d: all yields slot %#x as %v, want %v", step, s, b, want[s])
			}
			n++
		}
		if n != len(want) {
			t.Fatalf("step %d: all yields %d slots, want %d", step, n, len(want))
		}
	}
	if got := m.get(1 << 40); got.bits != 0 {
		t.Fatalf("absent slot holds %v", got)
	}
}
