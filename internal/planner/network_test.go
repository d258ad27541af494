package planner

import (
	"math"
	"math/rand/v2"
	"testing"
)

// randomNet is a network on n nodes with about density·n² edges of integer
// capacities 0..9; with demands, the source's edges are demand edges whose
// shares sum to 1.
func randomNet(r *rand.Rand, n int, density float64, demands bool) *flowNet {
	g := newFlowNet()
	for i := 2; i < n; i++ {
		g.node("v")
	}
	var fromSource []int
	for u := range n {
		for v := range n {
			if u == v || v == source || u == sink || r.Float64() > density {
				continue
			}
			e := flowEdge{from: u, to: v, cap: float64(r.IntN(10))}
			if demands && u == source {
				e.cap, e.demand = 0, true
				fromSource = append(fromSource, len(g.edges))
			}
			g.add(e)
		}
	}
	if demands {
		total := 0.0
		w := make([]float64, len(fromSource))
		for i := range w {
			w[i] = 0.1 + r.Float64()
			total += w[i]
		}
		for i, ei := range fromSource {
			g.edges[ei].perFlow = w[i] / total
		}
	}
	return g
}

// cuts calls fn for every cut: each set of nodes holding the source and
// not the sink, with the cut's capacity a·f + b.
func cuts(g *flowNet, fn func(side []bool, a, b float64)) {
	n := len(g.nodes)
	for mask := 0; mask < 1<<(n-2); mask++ {
		side := make([]bool, n)
		side[source] = true
		for v := 2; v < n; v++ {
			side[v] = mask&(1<<(v-2)) != 0
		}
		var a, b float64
		for _, e := range g.cutEdges(side) {
			a += e.perFlow
			b += e.cap
		}
		fn(side, a, b)
	}
}

// TestMinCutAgainstBruteForce checks gonum's max-flow value and the cut
// derived from values against every cut of small random graphs: the value
// is the least cut capacity, and the cut found is a minimum cut whose
// source side lies inside every minimum cut's (the one nearest the source).
func TestMinCutAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 400 {
		n := 2 + r.IntN(7)
		g := randomNet(r, n, 0.2+0.6*r.Float64(), false)
		value, side := g.minCut(0)
		least := math.Inf(1)
		cuts(g, func(_ []bool, _, b float64) { least = math.Min(least, b) })
		if math.Abs(value-least) > 1e-9 {
			t.Fatalf("trial %d (%d nodes, %d edges): max flow %g, least cut %g", trial, n, len(g.edges), value, least)
		}
		got := 0.0
		for _, e := range g.cutEdges(side) {
			got += e.cap
		}
		if math.Abs(got-least) > 1e-9 {
			t.Fatalf("trial %d: cut found has capacity %g, least is %g", trial, got, least)
		}
		cuts(g, func(other []bool, _, b float64) {
			if math.Abs(b-least) > 1e-9 {
				return
			}
			for v := range other {
				if side[v] && !other[v] {
					t.Fatalf("trial %d: node %d is on the source side of the cut found but not of another minimum cut", trial, v)
				}
			}
		})
	}
}

// TestLockstepMaxAgainstBruteForce checks Dinkelbach's iteration against
// the least ratio b/(1−a) over every cut of small random networks whose
// source edges are demands.
func TestLockstepMaxAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		n := 3 + r.IntN(6)
		g := randomNet(r, n, 0.3+0.6*r.Float64(), true)
		upper := 5 + 20*r.Float64()
		want := upper
		cuts(g, func(_ []bool, a, b float64) {
			if a < 1-1e-12 {
				want = math.Min(want, b/(1-a))
			}
		})
		got, cut := g.lockstepMax(upper)
		if math.Abs(got-want) > 1e-6*math.Max(1, want) {
			t.Fatalf("trial %d (%d nodes): lockstep max %g, want %g", trial, n, got, want)
		}
		if want < upper-1e-9 {
			var a, b float64
			for _, e := range cut {
				a += e.perFlow
				b += e.cap
			}
			if math.Abs(a*got+b-got) > 1e-6*math.Max(1, got) {
				t.Fatalf("trial %d: cut returned carries %g at f = %g: not the cut that binds", trial, a*got+b, got)
			}
		}
	}
}
