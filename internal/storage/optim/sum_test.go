package optim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/table"
)

// sumReference is sum one float at a time: refuse if any result is not
// finite, otherwise add.
func sumReference(v, g []float32) bool {
	for i := range v {
		if x := float64(v[i] + g[i]); math.IsInf(x, 0) || math.IsNaN(x) {
			return false
		}
	}
	for i := range v {
		v[i] += g[i]
	}
	return true
}

// The vector kernel must give the same bits and the same refusals as the
// one-float-at-a-time reference, at every length around its 32-float rounds
// (where head and tail meet) and with a bad sum at every position, in the
// head or the tail. Values are drawn wide enough that sums overflow, round
// and go subnormal.
func TestSumMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func() float32 {
		switch rng.IntN(8) {
		case 0:
			return math.MaxFloat32 * float32(rng.Float64()*2-1)
		case 1:
			return math.SmallestNonzeroFloat32 * float32(rng.IntN(100)-50)
		default:
			return float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10)))
		}
	}
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	check := func(t *testing.T, v, g []float32) {
		t.Helper()
		want, got := slices.Clone(v), slices.Clone(v)
		okWant, okGot := sumReference(want, g), sum(got, g)
		if okWant != okGot || !sameBits(got, want) {
			t.Fatalf("n=%d: sum = %v, reference %v; values differ: %v", len(v), okGot, okWant, !sameBits(got, want))
		}
	}
	for _, n := range []int{0, 1, 7, 31, 32, 33, 63, 64, 65, 95, 96, 97, 255, 256, 257, 1000} {
		for range 20 {
			v, g := make([]float32, n), make([]float32, n)
			for i := range v {
				v[i], g[i] = draw(), draw()
			}
			check(t, v, g)
		}
		for pos := range n {
			v, g := make([]float32, n), make([]float32, n)
			for i := range v {
				v[i], g[i] = float32(i), 0.5
			}
			g[pos] = bad[pos%len(bad)]
			check(t, v, g)
			g[pos], v[pos] = math.MaxFloat32, math.MaxFloat32 // overflow
			check(t, v, g)
		}
	}
}

// SumKeys must commit exactly the keys that Apply key by key commits, with
// the same bits, and count the others, at every width the kernel takes,
// every length around its rounds and with bad sums anywhere: one per key
// group of a round, several in one round, in the tail.
func TestSumKeysMatchesKeyByKey(t *testing.T) {
	u, err := New(table.Rule{Kind: table.Sum})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), math.MaxFloat32}
	for _, w := range []int{1, 2, 4, 8, 16, 32} {
		for _, keys := range []int{0, 1, 3, 31 / w, 32 / w, 32/w + 1, 64 / w, 100, 257} {
			n := keys * w
			for trial := range 30 {
				v, g := make([]float32, n), make([]float32, n)
				for i := range v {
					v[i], g[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
				}
				for range trial % 5 { // no bad sum in the first trial of five
					if n == 0 {
						break
					}
					i := rng.IntN(n)
					g[i] = bad[rng.IntN(len(bad))]
					if g[i] == math.MaxFloat32 {
						v[i] = math.MaxFloat32 // overflows
					}
				}
				want, got := slices.Clone(v), slices.Clone(v)
				wantRefused := 0
				for k := 0; k < n; k += w {
					if !sumReference(want[k:k+w], g[k:k+w]) {
						wantRefused++
					}
				}
				refused, ok := u.SumKeys(got, g, w)
				if !ok {
					if sumHead(sumLanes) == 0 {
						t.Skip("no vector kernel: SumKeys declines")
					}
					t.Fatalf("w=%d: SumKeys declined a width its kernel takes", w)
				}
				if refused != wantRefused || !sameBits(got, want) {
					t.Fatalf("w=%d n=%d: refused %d, key by key %d; values differ: %v", w, n, refused, wantRefused, !sameBits(got, want))
				}
			}
		}
	}
	for _, w := range []int{3, 5, 64} {
		if _, ok := u.SumKeys(make([]float32, w), make([]float32, w), w); ok {
			t.Errorf("w=%d: SumKeys took a width whose keys straddle its rounds", w)
		}
	}
	sgd, err := New(table.Rule{Kind: table.SGD, LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sgd.SumKeys(make([]float32, 32), make([]float32, 32), 1); ok {
		t.Error("SumKeys took the SGD rule")
	}
}
