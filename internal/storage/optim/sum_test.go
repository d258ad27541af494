package optim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
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
