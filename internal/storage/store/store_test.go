package store

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/terrace-ml/terrace/internal/storage/optim"
	"github.com/terrace-ml/terrace/table"
)

func newTable(t testing.TB, spec table.Spec) *Table {
	t.Helper()
	if spec.Name == "" {
		spec.Name = "t"
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	tb, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func seq(lo, n int) []uint64 {
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = uint64(lo + i)
	}
	return keys
}

// stored is a key's value and state as Range reports them.
type stored struct {
	key   uint64
	val   []float32
	state [][]float32
}

func dump(tb *Table, lo, hi uint64) []stored {
	var out []stored
	tb.Range(lo, hi, func(key uint64, val []float32, state [][]float32) bool {
		s := stored{key: key, val: slices.Clone(val)}
		for _, p := range state {
			s.state = append(s.state, slices.Clone(p))
		}
		out = append(out, s)
		return true
	})
	return out
}

// TestPullStoresNothing: a pull of keys that are not present reads their
// initial values, the same as once they are created, and creates none;
// a pull mixing present and absent keys reads each as it is.
func TestPullStoresNothing(t *testing.T) {
	spec := table.Spec{Width: 2, Init: table.Init{Kind: table.Uniform, Scale: 0.5, Seed: 3}}
	tb := newTable(t, spec)
	keys := []uint64{1, 5, 64, 900, 1 << 33}
	got := make([]float32, 2*len(keys))
	tb.Pull(keys, got)
	if s := tb.Stats(); s.Keys != 0 {
		t.Fatalf("a pull stored %d keys", s.Keys)
	}
	tb.Push([]uint64{5, 900}, []float32{1, 1, 1, 1})
	mixed := make([]float32, len(got))
	tb.Pull(keys, mixed)
	for i, k := range keys {
		want := slices.Clone(got[2*i : 2*i+2])
		if k == 5 || k == 900 {
			want[0]++
			want[1]++
		}
		if !slices.Equal(mixed[2*i:2*i+2], want) {
			t.Errorf("key %d: %v, want %v", k, mixed[2*i:2*i+2], want)
		}
	}
	if s := tb.Stats(); s.Keys != 2 {
		t.Fatalf("%d keys stored, want the 2 pushed", s.Keys)
	}
}

func TestPushPullRoundTrip(t *testing.T) {
	tb := newTable(t, table.Spec{Width: 3})
	keys := []uint64{0, 1, 2, 63, 64, 1000, 1 << 40, math.MaxUint64}
	vals := make([]float32, 3*len(keys))
	for i := range vals {
		vals[i] = float32(i)
	}
	if r := tb.Push(keys, vals); r != 0 {
		t.Fatalf("refused %d", r)
	}
	got := make([]float32, len(vals))
	tb.Pull(keys, got)
	if !slices.Equal(got, vals) {
		t.Fatalf("pulled %v, want %v", got, vals)
	}
	tb.Push(keys, vals)
	tb.Pull(keys, got)
	for i := range got {
		if got[i] != 2*vals[i] {
			t.Fatalf("after two pushes got[%d] = %g, want %g", i, got[i], 2*vals[i])
		}
	}
	if s := tb.Stats(); s.Keys != int64(len(keys)) || s.Values != int64(3*len(keys)) {
		t.Errorf("Stats = %+v, want %d keys, %d values", s, len(keys), 3*len(keys))
	}
}

// Keys pushed one at a time in an order that inserts at the front, the
// back and the middle of blocks land at the right ranks.
func TestInsertInMiddleOfBlock(t *testing.T) {
	tb := newTable(t, table.Spec{Width: 2, Rule: table.Rule{Kind: table.AdaGrad}})
	order := []uint64{63, 0, 32, 31, 1, 62, 33, 64 + 5, 64 + 4, 64 + 6, 17}
	for _, k := range order {
		tb.Push([]uint64{k}, []float32{float32(k), -float32(k)})
	}
	got := dump(tb, 0, 128)
	want := slices.Sorted(slices.Values(order))
	if len(got) != len(want) {
		t.Fatalf("Range gave %d keys, want %d", len(got), len(want))
	}
	for i, s := range got {
		k := want[i]
		if s.key != k {
			t.Fatalf("Range key %d = %d, want %d", i, s.key, k)
		}
		// AdaGrad from zero: one step of g moves the value by -LR*g/|g|
		// and leaves n = g².
		g := float64(k)
		wantV, wantN := float32(0), float32(g*g)
		if k != 0 {
			wantV = float32(-0.1)
		}
		if s.val[0] != wantV || s.state[0][0] != wantN || s.state[0][1] != wantN {
			t.Errorf("key %d: val %v state %v, want val[0] %g, n %g", k, s.val, s.state, wantV, wantN)
		}
	}
}

// model is the reference the table is checked against: a map of keys to
// values and state, updated key by key through the same optim rules.
type model struct {
	upd   *optim.Updater
	fresh *Table // pulls a key's initial value from an otherwise empty table
	width int
	keys  map[uint64]stored
}

// newModelRig validates spec (filling its defaults) and returns a table of
// it and a model of the same spec to check it against.
func newModelRig(t *testing.T, spec table.Spec) (*Table, *model) {
	t.Helper()
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	upd, err := optim.New(spec.Rule)
	if err != nil {
		t.Fatal(err)
	}
	return newTable(t, spec), &model{upd: upd, fresh: newTable(t, spec), width: spec.Width, keys: map[uint64]stored{}}
}

func (m *model) touch(k uint64) stored {
	if s, ok := m.keys[k]; ok {
		return s
	}
	s := stored{key: k, val: make([]float32, m.width)}
	m.fresh.Pull([]uint64{k}, s.val)
	for range m.upd.StateSlots() {
		s.state = append(s.state, make([]float32, m.width))
	}
	m.keys[k] = s
	return s
}

// value is k's value as a pull reads it, which stores nothing: a key not
// present reads as its initial value.
func (m *model) value(k uint64) []float32 {
	if s, ok := m.keys[k]; ok {
		return s.val
	}
	v := make([]float32, m.width)
	m.fresh.Pull([]uint64{k}, v)
	return v
}

func (m *model) push(keys []uint64, vals []float32) (refused int) {
	for i, k := range keys {
		s := m.touch(k)
		if !m.upd.Apply(s.val, s.state, vals[i*m.width:(i+1)*m.width]) {
			refused++
		}
	}
	return refused
}

func (m *model) sorted() []stored {
	var out []stored
	for _, k := range slices.Sorted(func(yield func(uint64) bool) {
		for k := range m.keys {
			if !yield(k) {
				return
			}
		}
	}) {
		out = append(out, m.keys[k])
	}
	return out
}

// Random pushes, pulls, runs, deletes and loads over a few slots, so that
// blocks go from sparse to dense and back, checked after every step.
func TestAgainstModel(t *testing.T) {
	for _, rule := range []table.Rule{{Kind: table.Sum}, {Kind: table.Adam}, {Kind: table.FTRL, L1: 0.01}} {
		t.Run(string(rule.Kind), func(t *testing.T) {
			const width, keySpace = 2, 5 * 64
			tb, m := newModelRig(t, table.Spec{Name: "m", Width: width, Rule: rule, Init: table.Init{Kind: table.Uniform, Scale: 0.5, Seed: 7}})
			rng := rand.New(rand.NewPCG(1, 2))
			randVals := func(n int) []float32 {
				v := make([]float32, n*width)
				for i := range v {
					v[i] = rng.Float32()*2 - 1
					if rng.IntN(200) == 0 {
						v[i] = float32(math.NaN())
					}
				}
				return v
			}
			randKeys := func() []uint64 {
				var keys []uint64
				p := rng.Float64()
				for k := range uint64(keySpace) {
					if rng.Float64() < p*p*0.5 {
						keys = append(keys, k)
					}
				}
				return keys
			}
			randRun := func() (uint64, int) {
				lo := rng.IntN(keySpace)
				return uint64(lo), 1 + rng.IntN(keySpace-lo)
			}
			for step := range 1500 {
				var op string
				switch rng.IntN(10) {
				case 0, 1, 2:
					op = "Push"
					keys := randKeys()
					vals := randVals(len(keys))
					if got, want := tb.Push(keys, vals), m.push(keys, vals); got != want {
						t.Fatalf("step %d: Push refused %d, model %d", step, got, want)
					}
				case 3, 4:
					op = "PushRun"
					lo, n := randRun()
					vals := randVals(n)
					if got, want := tb.PushRun(lo, vals), m.push(seq(int(lo), n), vals); got != want {
						t.Fatalf("step %d: PushRun refused %d, model %d", step, got, want)
					}
				case 5:
					op = "Pull"
					keys := randKeys()
					got := make([]float32, len(keys)*width)
					tb.Pull(keys, got)
					for i, k := range keys {
						if want := m.value(k); !sameBits(got[i*width:(i+1)*width], want) {
							t.Fatalf("step %d: Pull key %d = %v, want %v", step, k, got[i*width:(i+1)*width], want)
						}
					}
				case 6:
					op = "PullRun"
					lo, n := randRun()
					got := make([]float32, n*width)
					tb.PullRun(lo, got)
					for i := range n {
						k := lo + uint64(i)
						if want := m.touch(k).val; !sameBits(got[i*width:(i+1)*width], want) {
							t.Fatalf("step %d: PullRun key %d = %v, want %v", step, k, got[i*width:(i+1)*width], want)
						}
					}
				case 7, 8:
					op = "Delete"
					lo, n := randRun()
					n = min(n, 1+rng.IntN(100))
					tb.Delete(lo, lo+uint64(n))
					for k := lo; k < lo+uint64(n); k++ {
						delete(m.keys, k)
					}
				case 9:
					op = "Load"
					k := uint64(rng.IntN(keySpace))
					s := stored{key: k, val: randVals(1)}
					for range m.upd.StateSlots() {
						s.state = append(s.state, randVals(1))
					}
					tb.Load(k, s.val, s.state)
					m.keys[k] = s
				}
				got, want := dump(tb, 0, math.MaxUint64), m.sorted()
				if !sameStored(got, want) {
					t.Fatalf("step %d, after %s: table holds\n%v\nwant\n%v", step, op, got, want)
				}
				if s := tb.Stats(); s.Keys != int64(len(want)) {
					t.Fatalf("step %d, after %s: Stats.Keys = %d, want %d", step, op, s.Keys, len(want))
				}
			}
		})
	}
}

func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func sameStored(a, b []stored) bool {
	return slices.EqualFunc(a, b, func(x, y stored) bool {
		return x.key == y.key && sameBits(x.val, y.val) && slices.EqualFunc(x.state, y.state, sameBits)
	})
}

func TestRangeOrderAndBounds(t *testing.T) {
	tb := newTable(t, table.Spec{Width: 1})
	rng := rand.New(rand.NewPCG(3, 4))
	keys := map[uint64]bool{}
	for range 5000 {
		keys[rng.Uint64N(1<<20)] = true
	}
	keys[0], keys[math.MaxUint64] = true, true
	sorted := slices.Sorted(func(yield func(uint64) bool) {
		for k := range keys {
			if !yield(k) {
				return
			}
		}
	})
	vals := make([]float32, len(sorted))
	for i, k := range sorted {
		vals[i] = float32(k % 1000)
	}
	tb.Push(sorted, vals)

	tests := []struct{ lo, hi uint64 }{
		{0, math.MaxUint64},  // all but the last key, via a map scan
		{0, 1},               // one key
		{100, 164},           // a slot's worth, straddling two slots
		{1000, 1000 + 64*50}, // fewer slots than blocks: probed
		{5, 5},               // empty
		{9, 3},               // reversed, empty
		{1 << 20, math.MaxUint64},
	}
	for _, tt := range tests {
		var want []uint64
		for _, k := range sorted {
			if k >= tt.lo && k < tt.hi {
				want = append(want, k)
			}
		}
		var got []uint64
		tb.Range(tt.lo, tt.hi, func(key uint64, val []float32, state [][]float32) bool {
			if val[0] != float32(key%1000) || len(state) != 0 {
				t.Errorf("key %d: val %v state %v", key, val, state)
			}
			got = append(got, key)
			return true
		})
		if !slices.Equal(got, want) {
			t.Errorf("Range(%d,%d) gave %d keys, want %d (first diff near %v)", tt.lo, tt.hi, len(got), len(want), firstDiff(got, want))
		}
	}

	n := 0
	tb.Range(0, math.MaxUint64, func(uint64, []float32, [][]float32) bool {
		n++
		return n < 10
	})
	if n != 10 {
		t.Errorf("Range went on for %d calls after fn returned false at 10", n)
	}
}

func firstDiff(a, b []uint64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestDelete(t *testing.T) {
	tb := newTable(t, table.Spec{Width: 4, Rule: table.Rule{Kind: table.FTRL}})
	tb.PushRun(0, make([]float32, 4*1000))
	tb.Delete(10, 20)       // inside one slot
	tb.Delete(100, 300)     // across slots, whole and partial
	tb.Delete(990, 5000)    // past the end
	tb.Delete(2000, 3000)   // nothing there
	tb.DeleteSlot(15, 1<<2) // keys 960..1023 but 962
	tb.DeleteSlot(1<<40, 0) // nothing there
	var want []uint64
	for k := range uint64(1000) {
		if !(k >= 10 && k < 20 || k >= 100 && k < 300 || k >= 960 && k != 962) {
			want = append(want, k)
		}
	}
	var got []uint64
	for _, s := range dump(tb, 0, math.MaxUint64) {
		got = append(got, s.key)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after deletes: %d keys, want %d (first diff at %d)", len(got), len(want), firstDiff(got, want))
	}
	if s := tb.Stats(); s.Keys != int64(len(want)) {
		t.Errorf("Stats.Keys = %d, want %d", s.Keys, len(want))
	}
	tb.Delete(0, math.MaxUint64)
	if s := tb.Stats(); s.Keys != 0 || len(dump(tb, 0, math.MaxUint64)) != 0 {
		t.Errorf("after deleting everything: %+v", s)
	}
	// A deleted key comes back fresh.
	got2 := make([]float32, 4)
	tb.Push([]uint64{15}, []float32{1, 1, 1, 1})
	tb.Pull([]uint64{15}, got2)
	if s := dump(tb, 15, 16); len(s) != 1 || s[0].state[1][0] != 1 {
		t.Errorf("re-created key: %+v, want FTRL state n = 1 from one push", s)
	}
}

// Load is the inverse of Range: a table loaded from another's Range holds
// the same keys, values and state, whatever the order of loading.
func TestLoadFromRange(t *testing.T) {
	spec := table.Spec{Width: 3, Rule: table.Rule{Kind: table.Adam}, Init: table.Init{Kind: table.Normal, Scale: 1, Seed: 9}}
	src := newTable(t, spec)
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		var keys []uint64
		for k := uint64(0); k < 2000; k += 1 + rng.Uint64N(40) {
			keys = append(keys, k)
		}
		vals := make([]float32, 3*len(keys))
		for i := range vals {
			vals[i] = rng.Float32()
		}
		src.Push(keys, vals)
	}
	want := dump(src, 0, math.MaxUint64)
	dst := newTable(t, spec)
	dst.Push([]uint64{want[3].key}, []float32{5, 5, 5}) // overwritten by Load
	for _, i := range rng.Perm(len(want)) {
		dst.Load(want[i].key, want[i].val, want[i].state)
	}
	if got := dump(dst, 0, math.MaxUint64); !sameStored(got, want) {
		t.Fatalf("loaded table differs from its source")
	}
	if a, b := src.Stats(), dst.Stats(); a.Keys != b.Keys {
		t.Errorf("Stats: source %+v, loaded %+v", a, b)
	}
}

// Several goroutines push to the same keys, sparse and dense, with a sum
// rule: every update must land exactly once.
func TestConcurrentPushes(t *testing.T) {
	const (
		width   = 2
		workers = 8
		rounds  = 200
		space   = 3000
	)
	tb := newTable(t, table.Spec{Width: width})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 0))
			ones := make([]float32, space*width)
			for i := range ones {
				ones[i] = 1
			}
			pulled := make([]float32, space*width)
			for r := range rounds {
				switch r % 3 {
				case 0: // every key whose index is a multiple of w+1
					var keys []uint64
					for k := uint64(0); k < space; k += uint64(w + 1) {
						keys = append(keys, k)
					}
					tb.Push(keys, ones[:len(keys)*width])
				case 1: // a dense run from a random start
					lo := rng.IntN(space)
					tb.PushRun(uint64(lo), ones[:(space-lo)*width])
				case 2: // readers race with the writers
					tb.PullRun(0, pulled)
				}
			}
		})
	}
	wg.Wait()

	// Recompute the expected totals with the same random streams.
	want := make([]float32, space)
	for w := range workers {
		rng := rand.New(rand.NewPCG(uint64(w), 0))
		for r := range rounds {
			switch r % 3 {
			case 0:
				for k := 0; k < space; k += w + 1 {
					want[k]++
				}
			case 1:
				for k := rng.IntN(space); k < space; k++ {
					want[k]++
				}
			}
		}
	}
	got := make([]float32, space*width)
	tb.PullRun(0, got)
	for k := range space {
		if got[k*width] != want[k] || got[k*width+1] != want[k] {
			t.Fatalf("key %d = %v, want %g twice", k, got[k*width:(k+1)*width], want[k])
		}
	}
}

func TestInitDeterministic(t *testing.T) {
	for _, kind := range []table.InitKind{table.Uniform, table.Normal} {
		t.Run(string(kind), func(t *testing.T) {
			const width, n = 4, 20000
			spec := table.Spec{Width: width, Init: table.Init{Kind: kind, Scale: 0.1, Seed: 42}}
			a, b := newTable(t, spec), newTable(t, spec)
			keys := seq(1000, n)
			av := make([]float32, n*width)
			a.Pull(keys, av)
			// b creates the same keys in another order and by other paths.
			bv := make([]float32, n*width)
			for i := n - 1; i >= 0; i -= 2 {
				b.Pull(keys[i:i+1], bv[i*width:(i+1)*width])
			}
			b.PullRun(1000, bv)
			if !sameBits(av, bv) {
				t.Fatal("two tables created different initial values")
			}
			spec.Init.Seed++
			cv := make([]float32, n*width)
			newTable(t, spec).Pull(keys, cv)
			if same := countSame(av, cv); same > n*width/1000 {
				t.Errorf("another seed repeated %d of %d values", same, n*width)
			}

			var sum, sq float64
			for _, x := range av {
				if kind == table.Uniform && (x < -0.1 || x >= 0.1) {
					t.Fatalf("uniform value %g outside [-0.1,0.1)", x)
				}
				sum += float64(x)
				sq += float64(x) * float64(x)
			}
			mean, sd := sum/float64(len(av)), math.Sqrt(sq/float64(len(av)))
			wantSD := 0.1
			if kind == table.Uniform {
				wantSD = 0.1 / math.Sqrt(3)
			}
			if math.Abs(mean) > 0.002 || math.Abs(sd-wantSD) > 0.02*wantSD {
				t.Errorf("mean %.4g, sd %.4g; want 0 and %.4g", mean, sd, wantSD)
			}
			// The values within one key differ too.
			if av[0] == av[1] || av[1] == av[2] {
				t.Errorf("one key's values repeat: %v", av[:width])
			}
		})
	}
}

func countSame(a, b []float32) int {
	n := 0
	for i := range a {
		if a[i] == b[i] {
			n++
		}
	}
	return n
}

func TestNonFiniteRefused(t *testing.T) {
	tb := newTable(t, table.Spec{Width: 2})
	tb.PushRun(0, []float32{1, 1, 2, 2, 3, 3, 4, 4})
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	// A consecutive run with bad keys in it: the good keys still apply.
	if r := tb.Push([]uint64{0, 1, 2, 3}, []float32{1, 1, nan, 0, 1, 1, 1, inf}); r != 2 {
		t.Errorf("Push refused %d, want 2", r)
	}
	if r := tb.PushRun(2, []float32{math.MaxFloat32, math.MaxFloat32, 1, 1}); r != 0 {
		t.Errorf("PushRun refused %d, want 0", r)
	}
	if r := tb.PushRun(1, []float32{0, 0, math.MaxFloat32, 0, 0, 0}); r != 1 {
		t.Errorf("PushRun refused %d, want 1 (overflow)", r)
	}
	got := make([]float32, 8)
	tb.PullRun(0, got)
	want := []float32{2, 2, 2, 2, 3 + math.MaxFloat32, 3 + math.MaxFloat32, 5, 5}
	if !slices.Equal(got, want) {
		t.Errorf("values %v, want %v", got, want)
	}
}

// PushRun and PullRun over runs that start and end inside blocks, cover
// whole blocks, or stay inside one, agree with Push and Pull of the same keys.
func TestRunsMatchKeyLists(t *testing.T) {
	for _, r := range []struct{ lo, n int }{{0, 64}, {60, 200}, {1, 1}, {63, 2}, {64, 63}, {5, 1000}, {128, 128}} {
		t.Run(fmt.Sprintf("%d+%d", r.lo, r.n), func(t *testing.T) {
			spec := table.Spec{Width: 3, Rule: table.Rule{Kind: table.SGD}, Init: table.Init{Kind: table.Uniform, Scale: 1}}
			a, b := newTable(t, spec), newTable(t, spec)
			// Some keys exist beforehand, in both.
			pre := []uint64{0, 61, 62, 100, 200, 201, 700}
			a.Push(pre, make([]float32, 3*len(pre)))
			b.Push(pre, make([]float32, 3*len(pre)))
			vals := make([]float32, 3*r.n)
			for i := range vals {
				vals[i] = float32(i%7) - 3
			}
			keys := seq(r.lo, r.n)
			a.PushRun(uint64(r.lo), vals)
			b.Push(keys, vals)
			if ga, gb := dump(a, 0, math.MaxUint64), dump(b, 0, math.MaxUint64); !sameStored(ga, gb) {
				t.Fatal("PushRun and Push left different tables")
			}
			wide := seq(max(0, r.lo-70), r.n+140) // reaches keys never touched
			pa, pb := make([]float32, 3*len(wide)), make([]float32, 3*len(wide))
			a.PullRun(wide[0], pa)
			b.Pull(wide, pb)
			if !sameBits(pa, pb) {
				t.Fatal("PullRun and Pull gave different values")
			}
		})
	}
}

func TestLengthMismatchPanics(t *testing.T) {
	tb := newTable(t, table.Spec{Width: 2})
	for name, f := range map[string]func(){
		"Push":    func() { tb.Push([]uint64{1}, []float32{1}) },
		"Pull":    func() { tb.Pull([]uint64{1, 2}, make([]float32, 2)) },
		"PushRun": func() { tb.PushRun(0, []float32{1, 2, 3}) },
		"PullRun": func() { tb.PullRun(0, make([]float32, 1)) },
		"Load":    func() { tb.Load(0, []float32{1}, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with a wrong length did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestExportImport(t *testing.T) {
	spec := table.Spec{Name: "t", Width: 3, Rule: table.Rule{Kind: table.Adam}}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	a, _ := New(spec)
	b, _ := New(spec)
	keys := []uint64{1, 2, 3, 63, 64, 100, 5000}
	g := make([]float32, len(keys)*3)
	for i := range g {
		g[i] = float32(i%5) - 2
	}
	a.Push(keys, g)
	a.Push(keys, g)
	a.PushRun(200, make([]float32, 70*3))
	st := make([]float32, len(keys)*a.Stride())
	a.Export(keys, st)
	b.Import(keys, st)
	run := make([]float32, 70*a.Stride())
	a.ExportRun(200, run)
	b.ImportRun(200, run)
	want := map[uint64][]float32{}
	a.Range(0, 1<<20, func(k uint64, v []float32, s [][]float32) bool {
		for _, p := range s {
			v = append(append([]float32(nil), v...), p...)
		}
		want[k] = v
		return true
	})
	n := 0
	b.Range(0, 1<<20, func(k uint64, v []float32, s [][]float32) bool {
		for _, p := range s {
			v = append(append([]float32(nil), v...), p...)
		}
		w, ok := want[k]
		if !ok || len(w) != len(v) {
			t.Fatalf("key %d: %v, want %v", k, v, w)
		}
		for i := range w {
			if w[i] != v[i] {
				t.Fatalf("key %d: %v, want %v", k, v, w)
			}
		}
		n++
		return true
	})
	if n != len(want) || n != len(keys)+70 {
		t.Fatalf("%d keys imported, %d exported", n, len(want))
	}
}

func TestKeys(t *testing.T) {
	spec := table.Spec{Name: "t", Width: 1}
	spec.Validate()
	a, _ := New(spec)
	want := []uint64{0, 5, 63, 64, 1000, 1 << 40}
	a.Push(want, make([]float32, len(want)))
	if got := a.Keys(0, 1<<62); !slices.Equal(got, want) {
		t.Fatalf("Keys %v, want %v", got, want)
	}
	if got := a.Keys(5, 64); !slices.Equal(got, []uint64{5, 63}) {
		t.Fatalf("Keys [5,64) %v", got)
	}
}
