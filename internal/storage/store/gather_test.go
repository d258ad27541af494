package store

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/table"
)

// TestGatheredPushMatchesKeyByKey pushes the same long key lists into two
// tables of each rule and width: one in whole lists (pushGathered, where
// the table is narrow enough), one in lists too short for it (a call of
// the rule per key or run). Values, state and refusals must agree to the
// bit. The lists mix lone keys with runs, the table holds a dense group,
// and some pushed values are non-finite: a gathered call that one key
// refuses must still update the others, and only those.
func TestGatheredPushMatchesKeyByKey(t *testing.T) {
	rules := []table.Rule{{Kind: table.Sum}, {Kind: table.SGD}, {Kind: table.AdaGrad}, {Kind: table.Adam}, {Kind: table.FTRL, L1: 0.01}}
	for _, rule := range rules {
		for _, width := range []int{1, 3, gatherWidth, gatherWidth + 1} {
			t.Run(fmt.Sprintf("%v/w%d", rule.Kind, width), func(t *testing.T) {
				spec := table.Spec{Width: width, Rule: rule, Init: table.Init{Kind: table.Uniform, Scale: 0.5, Seed: 7}}
				whole, parts := newTable(t, spec), newTable(t, spec)
				// A dense group (full slots 0-15) among the sparse blocks.
				dense := make([]float32, 16*64*width)
				whole.PushRun(0, dense)
				parts.PushRun(0, dense)
				rng := rand.New(rand.NewPCG(3, uint64(width)))
				for round := range 4 {
					keys := gatherKeys(rng, 3000, 200_000)
					vals := make([]float32, len(keys)*width)
					for i := range vals {
						vals[i] = float32(rng.NormFloat64())
					}
					if round > 0 { // the first round creates the keys
						for range 5 {
							vals[rng.IntN(len(vals))] = float32(math.Inf(1))
						}
						vals[rng.IntN(len(vals))] = float32(math.NaN())
					}
					got := whole.Push(keys, vals)
					want := 0
					for i := 0; i < len(keys); i += minScatter - 1 {
						j := min(i+minScatter-1, len(keys))
						want += parts.Push(keys[i:j], vals[i*width:j*width])
					}
					if got != want {
						t.Fatalf("round %d: %d keys refused, want %d", round, got, want)
					}
				}
				all := seq(0, 200_000)
				a, b := make([]float32, len(all)*whole.Stride()), make([]float32, len(all)*whole.Stride())
				whole.Export(all, a)
				parts.Export(all, b)
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						k := i / whole.Stride()
						t.Fatalf("key %d: state %v, want %v", k, a[k*whole.Stride():(k+1)*whole.Stride()], b[k*whole.Stride():(k+1)*whole.Stride()])
					}
				}
			})
		}
	}
}

// gatherKeys returns about n distinct sorted keys below max: mostly lone
// random keys, some runs of a few consecutive ones.
func gatherKeys(rng *rand.Rand, n int, max uint64) []uint64 {
	keys := make([]uint64, 0, n)
	for len(keys) < n {
		k := rng.Uint64N(max - 8)
		run := 1
		if rng.IntN(8) == 0 {
			run = 2 + rng.IntN(6)
		}
		for j := range run {
			keys = append(keys, k+uint64(j))
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}
