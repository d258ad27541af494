package keyspace

import (
	"fmt"
	"slices"
	"testing"
)

func spans(k Keys) string {
	var out []string
	for sp := range k.Spans() {
		if sp.List != nil {
			out = append(out, fmt.Sprintf("%d@%d:%v", sp.Slot, sp.At, sp.List))
		} else {
			out = append(out, fmt.Sprintf("%d@%d:[%d+%d]", sp.Slot, sp.At, sp.Lo, sp.N))
		}
	}
	return fmt.Sprint(out)
}

func TestSpansCutAtSlots(t *testing.T) {
	list := KeyList([]uint64{0, 5, 63, 64, 200, 1000})
	if got, want := spans(list), "[0@0:[0 5 63] 1@3:[64] 3@4:[200] 15@5:[1000]]"; got != want {
		t.Errorf("list: %s, want %s", got, want)
	}
	var runs Keys
	runs.AddRun(60, 130)
	runs.AddRun(130, 140) // continues the last run
	runs.AddRun(1<<64-3, 1<<64-1)
	if runs.Len() != 82 || len(runs.Runs()) != 2 {
		t.Fatalf("runs %v of %d keys", runs.Runs(), runs.Len())
	}
	if got, want := spans(runs), "[0@0:[60+4] 1@4:[64+64] 2@68:[128+12] 288230376151711743@80:[18446744073709551613+2]]"; got != want {
		t.Errorf("runs: %s, want %s", got, want)
	}
	if got := list.Slots(); !slices.Equal(got, SlotSet{0, 2, 3, 4, 15, 16}) {
		t.Errorf("slots of the list: %v", got)
	}
	var rebuilt Keys
	for sp := range runs.Spans() {
		if sp.Slot != 1 {
			rebuilt.Add(sp)
		}
	}
	if got := rebuilt.Runs(); !slices.Equal(got, []Range{{60, 64}, {128, 140}, {1<<64 - 3, 1<<64 - 1}}) {
		t.Errorf("runs without slot 1: %v", got)
	}
}

func TestSpanBits(t *testing.T) {
	for _, c := range []struct {
		sp   Span
		want uint64
	}{
		{Span{Slot: 1, List: []uint64{64, 66, 127}}, 1 | 4 | 1<<63},
		{Span{Slot: 1, Lo: 64, N: 64}, ^uint64(0)},
		{Span{Slot: 1, Lo: 66, N: 3}, 7 << 2},
	} {
		if got := c.sp.Bits(); got != c.want {
			t.Errorf("%+v: bits %b, want %b", c.sp, got, c.want)
		}
	}
}

// TestSpansAllocateNothing: the data path walks every message's keys by
// slot (ownership checks), so the walk must not allocate.
func TestSpansAllocateNothing(t *testing.T) {
	keys := make([]uint64, 1000)
	for i := range keys {
		keys[i] = uint64(i * 7)
	}
	list, run := KeyList(keys), KeyRun(100, 5000)
	n := 0
	allocs := testing.AllocsPerRun(100, func() {
		for sp := range list.Spans() {
			n += sp.Len()
		}
		for sp := range run.Spans() {
			n += int(sp.Slot)
		}
	})
	if allocs != 0 {
		t.Fatalf("walking a key set by slot allocates %v times", allocs)
	}
}
