package sim_test

import (
	"testing"

	"github.com/terrace-ml/terrace/internal/harness/sim"
)

// TestBookCatchesStaleRead: the staleness check is not vacuous, and owes
// nothing of what a slot lost with its last copy.
func TestBookCatchesStaleRead(t *testing.T) {
	b := sim.NewBook(nil)
	// Rank 0 pushes key 7 at clocks 0 and 1, ending each.
	var loss int64
	for clock := range int64(2) {
		b.Ack(b.Pushing(0, []uint64{7}))
		b.Tick(0, clock+1)
		if clock == 0 {
			loss = b.Mark() // key 7's slot loses every copy after the first push
		}
	}
	b.Tick(1, 2)
	never := func(uint64, int64) int64 { return 0 }
	lost := func(uint64, int64) int64 { return loss }
	for _, c := range []struct {
		clock    int64
		bound    int
		val      float32
		finished []int
		lostAt   func(uint64, int64) int64
		stale    bool
	}{
		{clock: 2, bound: 0, val: 2},
		{clock: 2, bound: 0, val: 1, stale: true},               // misses rank 0's push at clock 1
		{clock: 2, bound: 1, val: 1},                            // clock 1 is within the bound
		{clock: 3, bound: 1, val: 1, stale: true},               // rank 0 reached 2 after both pushes
		{clock: 2, bound: 0, val: 0, finished: []int{0}},        // rank 0 declared dead: exempt
		{clock: 9, bound: 0, val: 2},                            // rank 0 never sent clock 9: nothing more is owed
		{clock: 2, bound: 0, val: 1, lostAt: lost},              // the first push was lost with the slot
		{clock: 2, bound: 0, val: 0, lostAt: lost, stale: true}, // the second was not
	} {
		b.Read(sim.Read{Rank: 1, Clock: c.clock, Staleness: c.bound, Keys: []uint64{7}, Values: []float32{c.val}, Finished: c.finished})
		reads := b.Reads()
		if c.lostAt == nil {
			c.lostAt = never
		}
		msg := b.CheckRead(reads[len(reads)-1], c.lostAt)
		if (msg != "") != c.stale {
			t.Errorf("read %v at clock %d, bound %d, finished %v: %q", c.val, c.clock, c.bound, c.finished, msg)
		}
	}
	b.Pushing(1, []uint64{7, 8})
	if u := b.Uncertain(); u[7] != 1 || u[8] != 1 || b.Acked(7, 0) != 2 || b.Acked(7, loss) != 1 {
		t.Errorf("uncertain %v, acknowledged %d, %d since the loss", u, b.Acked(7, 0), b.Acked(7, loss))
	}
}
