package optim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/table"
)

func mustNew(t testing.TB, r table.Rule) *Updater {
	t.Helper()
	u, err := New(r)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// step is one push of g and the stored value and state expected after it,
// worked out by hand from the formulas in the package documentation.
type step struct {
	g, v float64
	st   []float64
}

func TestRulesAgainstHandComputed(t *testing.T) {
	const ftrlZ2 = 1 - 3 + (3.1622776601683795-1)/0.1*(0.5/21)
	tests := []struct {
		name  string
		rule  table.Rule
		v0    float32
		steps []step
	}{
		{"sum", table.Rule{Kind: table.Sum}, 1, []step{
			{g: 0.5, v: 1.5},
			{g: -2, v: -0.5},
		}},
		{"sgd with l2", table.Rule{Kind: table.SGD, LR: 0.5, L2: 0.1}, 2, []step{
			{g: 1, v: 2 - 0.5*(1+0.2)},       // 1.4
			{g: 1, v: 1.4 - 0.5*(1+0.14)},    // 0.83
			{g: -2, v: 0.83 - 0.5*(-2+.083)}, // 1.7885
		}},
		{"adagrad", table.Rule{Kind: table.AdaGrad, LR: 0.1, Eps: 1e-8}, 1, []step{
			{g: 3, v: 1 - 0.1*3/3, st: []float64{9}},
			{g: 4, v: 0.9 - 0.1*4/5, st: []float64{25}},
			{g: 0, v: 0.82, st: []float64{25}},
		}},
		{"adagrad with l2", table.Rule{Kind: table.AdaGrad, LR: 0.1, Eps: 1e-8, L2: 0.5}, 1, []step{
			{g: 3, v: 1 - 0.1*3.5/3.5, st: []float64{12.25}},
			{g: 0, v: 0.9 - 0.1*0.45/math.Sqrt(12.25+0.45*0.45), st: []float64{12.25 + 0.45*0.45}},
		}},
		{"adam", table.Rule{Kind: table.Adam, LR: 0.001, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, 1, []step{
			// Step 1: m=0.2, s=0.004, both corrections give back g and g².
			{g: 2, v: 1 - 0.001*2/(2+1e-8), st: []float64{0.2, 0.004, 1}},
			// Step 2: m=-0.02, s=0.007996; mhat=-0.02/0.19, shat=0.007996/0.001999=4.
			{g: -2, v: 0.999 + 0.001*(0.02/0.19)/2, st: []float64{-0.02, 0.007996, 2}},
		}},
		{"ftrl", table.Rule{Kind: table.FTRL, LR: 0.1, Beta: 1}, 0, []step{
			// sigma=10, z=1, n=1, w=-1/((1+1)/0.1).
			{g: 1, v: -0.05, st: []float64{1, 1}},
			// sigma=(√2-1)/0.1, z=2+sigma*0.05, n=2, w=-z/((1+√2)/0.1).
			{g: 1, v: -(2 + (math.Sqrt2-1)*0.5) / ((1 + math.Sqrt2) / 0.1), st: []float64{2 + (math.Sqrt2-1)*0.5, 2}},
		}},
		{"ftrl with l1 shrink", table.Rule{Kind: table.FTRL, LR: 0.1, Beta: 1, L1: 0.5, L2: 1}, 0, []step{
			{g: 1, v: -(1 - 0.5) / (20 + 1), st: []float64{1, 1}},
			// sigma=(√10-1)/0.1, z=1-3-sigma*w=-1.485 (sign flips), n=10.
			{g: -3, v: -(ftrlZ2 + 0.5) / ((1+math.Sqrt(10))/0.1 + 1), st: []float64{ftrlZ2, 10}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := mustNew(t, tt.rule)
			v := []float32{tt.v0}
			st := make([][]float32, u.StateSlots())
			for j := range st {
				st[j] = make([]float32, 1)
			}
			for i, s := range tt.steps {
				if !u.Apply(v, st, []float32{float32(s.g)}) {
					t.Fatalf("step %d refused", i)
				}
				if !close(v[0], s.v) {
					t.Errorf("step %d: v = %.9g, want %.9g", i, v[0], s.v)
				}
				for j, want := range s.st {
					if !close(st[j][0], want) {
						t.Errorf("step %d: state %d = %.9g, want %.9g", i, j, st[j][0], want)
					}
				}
			}
		})
	}
}

// close allows for float32 rounding of the stored value and state.
func close(got float32, want float64) bool {
	return math.Abs(float64(got)-want) <= 1e-6*math.Max(1, math.Abs(want))
}

func TestFTRLStrongL1GivesExactZeros(t *testing.T) {
	u := mustNew(t, table.Rule{Kind: table.FTRL, LR: 0.1, Beta: 1, L1: 100})
	const w = 8
	v := make([]float32, w)
	st := [][]float32{make([]float32, w), make([]float32, w)}
	g := make([]float32, w)
	for i := range 50 {
		for j := range g {
			g[j] = float32(math.Sin(float64(i*w + j))) // |z| grows far slower than L1
		}
		if !u.Apply(v, st, g) {
			t.Fatalf("step %d refused", i)
		}
		for j, x := range v {
			if math.Float32bits(x) != 0 {
				t.Fatalf("step %d: v[%d] = %g, want exactly +0", i, j, x)
			}
		}
	}
	if slices.Equal(st[0], make([]float32, w)) {
		t.Fatal("z never moved; the test would pass without FTRL running")
	}
}

func TestRefusesNonFinite(t *testing.T) {
	big := float32(math.MaxFloat32)
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	rules := []table.Rule{
		{Kind: table.Sum},
		{Kind: table.SGD, LR: 10},
		{Kind: table.AdaGrad, LR: 0.1, Eps: 1e-8},
		{Kind: table.Adam, LR: 0.001, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
		{Kind: table.FTRL, LR: 0.1, Beta: 1},
	}
	pushes := []struct {
		name string
		v, g []float32
	}{
		{"nan in g", []float32{1, 2, 3}, []float32{0.5, nan, 0.5}},
		{"inf in g", []float32{1, 2, 3}, []float32{0.5, 0.5, -inf}},
		{"overflowing result", []float32{1, big, 3}, []float32{0.5, big, 0.5}},
	}
	for _, r := range rules {
		for _, p := range pushes {
			t.Run(string(r.Kind)+"/"+p.name, func(t *testing.T) {
				u := mustNew(t, r)
				if r.Kind == table.SGD && p.name == "overflowing result" {
					p.g = []float32{0.5, -big, 0.5} // SGD subtracts
				}
				v := slices.Clone(p.v)
				st := make([][]float32, u.StateSlots())
				for j := range st {
					st[j] = []float32{0.25, 0.5, 0.75}
				}
				if r.Kind == table.FTRL && p.name == "overflowing result" {
					st[0][1] = big // z overflows
				}
				wantV := slices.Clone(v)
				wantSt := make([][]float32, len(st))
				for j := range st {
					wantSt[j] = slices.Clone(st[j])
				}
				if u.Apply(v, st, p.g) {
					t.Fatalf("accepted; v = %v, state = %v", v, st)
				}
				if !sameBits(v, wantV) {
					t.Errorf("v changed: %v, want %v", v, wantV)
				}
				for j := range st {
					if !sameBits(st[j], wantSt[j]) {
						t.Errorf("state %d changed: %v, want %v", j, st[j], wantSt[j])
					}
				}
			})
		}
	}
}

// Sum checks four lanes at a time; a bad value must be caught in any lane
// and in the tail.
func TestSumRefusesAtEveryPosition(t *testing.T) {
	u := mustNew(t, table.Rule{Kind: table.Sum})
	const w = 11
	for pos := range w {
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1)), math.MaxFloat32} {
			v, g := make([]float32, w), make([]float32, w)
			for i := range v {
				v[i], g[i] = float32(i), 1
			}
			v[pos] = math.MaxFloat32
			g[pos] = bad
			want := slices.Clone(v)
			if u.Apply(v, nil, g) {
				t.Fatalf("pos %d, g=%g: accepted", pos, bad)
			}
			if !sameBits(v, want) {
				t.Fatalf("pos %d, g=%g: v changed to %v", pos, bad, v)
			}
		}
	}
}

func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// The store applies one call to a run of consecutive keys; that must equal
// applying each key on its own, even when their Adam step counts differ.
func TestApplyOverSeveralKeysMatchesOneByOne(t *testing.T) {
	for _, r := range []table.Rule{
		{Kind: table.Sum},
		{Kind: table.SGD, LR: 0.1, L2: 0.01},
		{Kind: table.AdaGrad, LR: 0.1, Eps: 1e-8},
		{Kind: table.Adam, LR: 0.001, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
		{Kind: table.FTRL, LR: 0.1, Beta: 1, L1: 0.01, L2: 0.1},
	} {
		t.Run(string(r.Kind), func(t *testing.T) {
			u := mustNew(t, r)
			const w, keys = 3, 4
			v1 := make([]float32, w*keys)
			st1 := make([][]float32, u.StateSlots())
			for j := range st1 {
				st1[j] = make([]float32, w*keys)
			}
			// Key k has been pushed k times already.
			for k := range keys {
				for range k {
					g := []float32{0.1, -0.2, 0.3}
					var st [][]float32
					for j := range st1 {
						st = append(st, st1[j][k*w:(k+1)*w])
					}
					u.Apply(v1[k*w:(k+1)*w], st, g)
				}
			}
			v2 := slices.Clone(v1)
			st2 := make([][]float32, len(st1))
			for j := range st1 {
				st2[j] = slices.Clone(st1[j])
			}
			g := []float32{1, 2, 3, -1, -2, -3, 0.5, 0, -0.5, 4, 5, 6}
			if !u.Apply(v1, st1, g) {
				t.Fatal("refused")
			}
			for k := range keys {
				var st [][]float32
				for j := range st2 {
					st = append(st, st2[j][k*w:(k+1)*w])
				}
				if !u.Apply(v2[k*w:(k+1)*w], st, g[k*w:(k+1)*w]) {
					t.Fatalf("key %d refused", k)
				}
			}
			if !sameBits(v1, v2) {
				t.Errorf("values: together %v, one by one %v", v1, v2)
			}
			for j := range st1 {
				if !sameBits(st1[j], st2[j]) {
					t.Errorf("state %d: together %v, one by one %v", j, st1[j], st2[j])
				}
			}
		})
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		rule  table.Rule
		slots int
		err   error
	}{
		{table.Rule{Kind: table.Sum}, 0, nil},
		{table.Rule{Kind: table.SGD, LR: 0.1}, 0, nil},
		{table.Rule{Kind: table.AdaGrad, LR: 0.1}, 1, nil},
		{table.Rule{Kind: table.Adam, LR: 0.1}, 3, nil},
		{table.Rule{Kind: table.FTRL, LR: 0.1}, 2, nil},
		{table.Rule{Kind: table.FTRL}, 0, ErrRule},
		{table.Rule{Kind: "rmsprop"}, 0, ErrRule},
	}
	for _, tt := range tests {
		u, err := New(tt.rule)
		if !errors.Is(err, tt.err) {
			t.Errorf("New(%+v): err = %v, want %v", tt.rule, err, tt.err)
			continue
		}
		if err == nil && u.StateSlots() != tt.slots {
			t.Errorf("New(%+v).StateSlots() = %d, want %d", tt.rule, u.StateSlots(), tt.slots)
		}
	}
}

func BenchmarkApplySum(b *testing.B) {
	u := mustNew(b, table.Rule{Kind: table.Sum})
	for _, w := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("width=%d", w), func(b *testing.B) {
			v, g := make([]float32, w), make([]float32, w)
			for i := range g {
				g[i] = 1e-3
			}
			b.SetBytes(int64(4 * w))
			for b.Loop() {
				u.Apply(v, nil, g)
			}
		})
	}
}
