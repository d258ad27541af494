package store

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

func denseTable(t *testing.T, keys int) *Table {
	t.Helper()
	tb, err := New(table.Spec{Name: "d", Width: 1, Rule: table.Rule{Kind: table.Sum}})
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]float32, keys)
	for i := range vals {
		vals[i] = float32(i)
	}
	tb.PushRun(0, vals)
	return tb
}

func pinned(p *Pin) []float32 {
	var out []float32
	for _, v := range p.Views {
		out = append(out, v...)
	}
	return out
}

// A pinned run reads what PullRun reads, and a write while it is pinned
// leaves the pinned values alone (the reply being sent must match its
// CRC) but is seen by the next read.
func TestPinRunIsStableUnderWrites(t *testing.T) {
	tb := denseTable(t, 3*groupKeys)
	want := make([]float32, 2*groupKeys)
	tb.PullRun(100, want)
	var p Pin
	if !tb.PinRun(100, len(want), &p) {
		t.Fatal("PinRun refused a run of dense groups")
	}
	if got := pinned(&p); !slices.Equal(got, want) {
		t.Fatalf("pinned values differ from PullRun's")
	}
	ones := make([]float32, 3*groupKeys)
	for i := range ones {
		ones[i] = 1
	}
	tb.PushRun(0, ones)
	tb.DeleteSlot(5, 0) // a removal dissolves a pinned group
	if got := pinned(&p); !slices.Equal(got, want) {
		t.Fatalf("a write changed pinned values")
	}
	p.Release()
	after := make([]float32, 64)
	tb.PullRun(6*64, after)
	for i, v := range after {
		if v != float32(6*64+i)+1 {
			t.Fatalf("key %d = %v after the push, want %v", 6*64+i, v, float32(6*64+i)+1)
		}
	}
	if tb.PinRun(100, len(want), &p) {
		t.Fatal("PinRun accepted a run through a group with a deleted slot")
	}
	if len(p.Views) != 0 || len(p.groups) != 0 {
		t.Fatal("a refused PinRun left views or pins behind")
	}
}

// Optimizer state interleaves with values, and partial groups are not
// dense: PinRun refuses both, so callers copy.
func TestPinRunRefusesWhatIsNotContiguous(t *testing.T) {
	tb, err := New(table.Spec{Name: "a", Width: 1, Rule: table.Rule{Kind: table.AdaGrad, LR: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	tb.PushRun(0, make([]float32, 2048))
	var p Pin
	if tb.PinRun(0, 1024, &p) {
		t.Fatal("PinRun accepted a table with optimizer state")
	}
	d := denseTable(t, 1000) // less than one group
	if d.PinRun(0, 1000, &p) {
		t.Fatal("PinRun accepted a partial group")
	}
}

// A dense push or pull allocates nothing once its keys exist.
func TestDenseRunsDoNotAllocate(t *testing.T) {
	const n = 1 << 16
	tb := denseTable(t, n)
	vals := make([]float32, n)
	var p Pin
	if a := testing.AllocsPerRun(20, func() { tb.PushRun(0, vals) }); a != 0 {
		t.Errorf("PushRun: %v allocations a run", a)
	}
	if a := testing.AllocsPerRun(20, func() { tb.PullRun(0, vals) }); a != 0 {
		t.Errorf("PullRun: %v allocations a run", a)
	}
	tb.PinRun(0, n, &p)
	p.Release()
	if a := testing.AllocsPerRun(20, func() { tb.PinRun(0, n, &p); p.Release() }); a != 0 {
		t.Errorf("PinRun: %v allocations a run", a)
	}
}

// PushRuns and PullRuns over short runs do what PushRun and PullRun do
// run by run.
func TestRunsMatchRunByRun(t *testing.T) {
	a, b := denseTable(t, 4096), denseTable(t, 4096)
	runs := []keyspace.Range{{Lo: 3, Hi: 70}, {Lo: 128, Hi: 192}, {Lo: 200, Hi: 201}, {Lo: 1000, Hi: 3000}}
	var vals []float32
	for _, r := range runs {
		for k := r.Lo; k < r.Hi; k++ {
			vals = append(vals, float32(k%11))
		}
	}
	a.PushRuns(runs, vals)
	off := 0
	for _, r := range runs {
		b.PushRun(r.Lo, vals[off:off+int(r.Len())])
		off += int(r.Len())
	}
	ga, gb := make([]float32, 4096), make([]float32, 4096)
	a.PullRun(0, ga)
	b.PullRun(0, gb)
	if !slices.Equal(ga, gb) {
		t.Fatal("PushRuns differs from PushRun run by run")
	}
	got := make([]float32, len(vals))
	a.PullRuns(runs, got)
	off = 0
	for _, r := range runs {
		if !slices.Equal(got[off:off+int(r.Len())], ga[r.Lo:r.Hi]) {
			t.Fatalf("PullRuns of %v differs", r)
		}
		off += int(r.Len())
	}
}

// Pushes running while replies are pinned never write a pinned buffer:
// each pinned group reads as one push's state throughout (the race
// detector checks the rest).
func TestPinRunUnderConcurrentPushes(t *testing.T) {
	const n = 4 * groupKeys
	tb, err := New(table.Spec{Name: "c", Width: 1, Rule: table.Rule{Kind: table.Sum}})
	if err != nil {
		t.Fatal(err)
	}
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	tb.PushRun(0, ones)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				tb.PushRun(0, ones)
			}
		}
	}()
	var p Pin
	for range 200 {
		if !tb.PinRun(0, n, &p) {
			t.Fatal("PinRun refused dense groups")
		}
		first := make([]float32, len(p.Views))
		for i, v := range p.Views {
			first[i] = v[0]
			m := map[float32]int{}
			for _, x := range v {
				m[x]++
			}
			if len(m) != 1 {
				t.Fatalf("group %d not uniform when pinned: %v (%d groups pinned)", i, m, len(p.groups))
			}
		}
		for range 3 {
			for i, v := range p.Views {
				for _, x := range v {
					if x != first[i] {
						t.Fatalf("group %d changed while pinned: %v then %v", i, first[i], x)
					}
				}
			}
		}
		p.Release()
	}
	close(stop)
	<-done
}

// A long key list, visited stripe by stripe, leaves the table as the same
// keys pushed in short lists (visited in key order) do, and pulls the same.
func TestLongListsMatchShortOnes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	seen := map[uint64]bool{}
	var keys []uint64
	for len(keys) < 5000 {
		k := rng.Uint64N(1 << 20)
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	vals := make([]float32, len(keys))
	for i := range vals {
		vals[i] = float32(i % 13)
	}
	spec := table.Spec{Name: "s", Width: 1, Rule: table.Rule{Kind: table.Sum}}
	long, _ := New(spec)
	short, _ := New(spec)
	for range 2 {
		long.Push(keys, vals)
		for i := 0; i < len(keys); i += minScatter - 1 {
			j := min(i+minScatter-1, len(keys))
			short.Push(keys[i:j], vals[i:j])
		}
	}
	a, b := make([]float32, len(keys)), make([]float32, len(keys))
	long.Pull(keys, a)
	for i := 0; i < len(keys); i += minScatter - 1 {
		j := min(i+minScatter-1, len(keys))
		short.Pull(keys[i:j], b[i:j])
	}
	if !slices.Equal(a, b) {
		t.Fatal("a long list's push or pull differs from short lists'")
	}
	if long.Stats() != short.Stats() {
		t.Fatalf("stats differ: %+v and %+v", long.Stats(), short.Stats())
	}
}

// TestTwoRunsInOneSlot pushes two runs that share a slot into an empty
// table: the second piece's block was looked up before the first piece
// created its keys, and inserting from that stale block lost the first
// run's keys and miscounted the table.
func TestTwoRunsInOneSlot(t *testing.T) {
	tb := newTable(t, table.Spec{Width: 1})
	tb.PushRuns([]keyspace.Range{{Lo: 0, Hi: 3}, {Lo: 5, Hi: 8}}, []float32{1, 2, 3, 4, 5, 6})
	if got := tb.Keys(0, 64); !slices.Equal(got, []uint64{0, 1, 2, 5, 6, 7}) {
		t.Fatalf("keys %v, want 0-2 and 5-7", got)
	}
	dst := make([]float32, 8)
	tb.PullRun(0, dst)
	if want := []float32{1, 2, 3, 0, 0, 4, 5, 6}; !slices.Equal(dst, want) {
		t.Fatalf("pulled %v, want %v", dst, want)
	}
	if st := tb.Stats(); st.Keys != 8 {
		t.Fatalf("Stats counts %d keys, want 8 (the pull created 3 and 4)", st.Keys)
	}
}

// Runs over dense groups (updated group by group in one pass each) leave
// the table, and the refused count, as the same keys pushed as a list
// (block by block) do: with runs ending inside groups, a group dissolved
// by a removal and another never filled between dense ones, non-finite
// updates inside a dense group, and widths 1 and 3.
func TestWholeGroupsMatchKeyLists(t *testing.T) {
	for _, w := range []int{1, 3} {
		t.Run(fmt.Sprintf("width%d", w), func(t *testing.T) {
			spec := table.Spec{Name: "g", Width: w, Rule: table.Rule{Kind: table.Sum}, Init: table.Init{Kind: table.Uniform, Scale: 1}}
			a, b := newTable(t, spec), newTable(t, spec)
			const groups = 10
			// Groups 0-9 dense, except 6, of which only half exists.
			for _, tb := range []*Table{a, b} {
				tb.PushRun(0, make([]float32, 6*groupKeys*w))
				tb.PushRun(6*groupKeys, make([]float32, groupKeys/2*w))
				tb.PushRun(7*groupKeys, make([]float32, 3*groupKeys*w))
				tb.DeleteSlot(3*groupSlots+5, 7) // dissolves group 3
			}
			runs := []keyspace.Range{{Lo: 100, Hi: 5 * groupKeys}, {Lo: 5*groupKeys + 1, Hi: 9*groupKeys + 17}, {Lo: 9*groupKeys + 20, Hi: groups * groupKeys}}
			var keys []uint64
			for _, r := range runs {
				keys = append(keys, seq(int(r.Lo), int(r.Len()))...)
			}
			vals := make([]float32, len(keys)*w)
			for i := range vals {
				vals[i] = float32(i%9) - 4
			}
			nan := float32(math.NaN())
			bad := []int{2*groupKeys*w + 5, 8*groupKeys*w + 3*w, 8*groupKeys*w + 3*w + 1}
			refused := map[int]bool{}
			for _, i := range bad {
				vals[i] = nan
				refused[i/w] = true
			}
			ra, rb := a.PushRuns(runs, vals), b.Push(keys, vals)
			if ra != rb || ra != len(refused) {
				t.Fatalf("PushRuns refused %d keys, Push %d, want %d", ra, rb, len(refused))
			}
			if da, db := dump(a, 0, math.MaxUint64), dump(b, 0, math.MaxUint64); !sameStored(da, db) {
				t.Fatal("PushRuns over dense groups and Push left different tables")
			}
			if a.Stats() != b.Stats() {
				t.Fatalf("stats differ: %+v and %+v", a.Stats(), b.Stats())
			}
		})
	}
}

// The group index holds groups near the start of the key space in an
// array and the rest in a map; both find what was set, forget what was
// cleared, and count the groups held.
func TestGroupIndex(t *testing.T) {
	var x groupIndex
	a, b, c := &denseGroup{}, &denseGroup{}, &denseGroup{}
	near, edge, far := uint64(3*stripes+7), uint64(nearGroups*stripes-1), uint64(nearGroups*stripes+7)
	x.set(far+stripes, nil) // clearing what is not there changes nothing
	x.set(near+stripes, nil)
	x.set(near, a)
	x.set(edge, b)
	x.set(far, c)
	x.set(far, c)
	if x.get(near) != a || x.get(edge) != b || x.get(far) != c || x.n != 3 {
		t.Fatalf("after three sets: %p %p %p, n %d", x.get(near), x.get(edge), x.get(far), x.n)
	}
	if x.get(near+stripes) != nil || x.get(far+stripes) != nil || x.get(1<<62) != nil {
		t.Fatal("found a group never set")
	}
	x.set(edge, nil)
	x.set(far, nil)
	if x.get(edge) != nil || x.get(far) != nil || x.get(near) != a || x.n != 1 {
		t.Fatalf("after two clears: n %d", x.n)
	}
}

// Dense groups far out in the key space (the index's map) are pushed
// whole, pinned and dissolved as near ones are.
func TestFarDenseGroups(t *testing.T) {
	tb := newTable(t, table.Spec{Width: 1, Rule: table.Rule{Kind: table.Sum}})
	lo := uint64(1) << 40
	ones := make([]float32, 2*groupKeys)
	for i := range ones {
		ones[i] = 1
	}
	tb.PushRun(lo, ones)
	tb.PushRun(lo, ones)
	var p Pin
	if !tb.PinRun(lo, 2*groupKeys, &p) {
		t.Fatal("PinRun refused two dense groups past 2^40")
	}
	for _, v := range pinned(&p) {
		if v != 2 {
			t.Fatalf("pinned %v, want 2", v)
		}
	}
	p.Release()
	tb.DeleteSlot(keyspace.Slot(lo)+3, 0)
	if tb.PinRun(lo, groupKeys, &p) {
		t.Fatal("PinRun accepted a group dissolved by a removal")
	}
	if countGroups(tb) != 1 {
		t.Fatalf("%d dense groups after the removal, want 1", countGroups(tb))
	}
}

func countGroups(tb *Table) (n int) {
	for i := range tb.st {
		n += tb.st[i].dense.n
	}
	return n
}
