package planner

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/graph/network"
	"gonum.org/v1/gonum/graph/simple"
)

// A flow network of updates per second. Node 0 is the source, node 1 the
// sink. An edge's capacity is cap + perFlow·F for the flow F being tested:
// perFlow is non-zero only on the demand edges of a lockstep network, which
// carry each worker class's fixed share of the flow.
type flowNet struct {
	nodes []string
	edges []flowEdge
	pairs map[[2]int]bool
}

type flowEdge struct {
	name     string // "" for structural edges that never bind
	from, to int
	cap      float64
	perFlow  float64
	demand   bool // a demand edge: in a cut, it is not a resource
}

const (
	source = 0
	sink   = 1
	// relTol is the relative tolerance of flow comparisons: Dinic on these
	// small graphs is exact to about 1e-12 relative; 1e-7 leaves room.
	relTol = 1e-7
)

func newFlowNet() *flowNet {
	return &flowNet{nodes: []string{"source", "sink"}, pairs: map[[2]int]bool{}}
}

func (n *flowNet) node(name string) int {
	n.nodes = append(n.nodes, name)
	return len(n.nodes) - 1
}

// add adds an edge; a network has at most one edge per ordered pair of
// nodes (gonum's simple graphs hold one).
func (n *flowNet) add(e flowEdge) {
	k := [2]int{e.from, e.to}
	if n.pairs[k] || e.from == e.to {
		panic(fmt.Sprintf("planner: duplicate or self edge %s -> %s", n.nodes[e.from], n.nodes[e.to]))
	}
	n.pairs[k] = true
	n.edges = append(n.edges, e)
}

func (e flowEdge) capAt(f float64) float64 { return e.cap + e.perFlow*f }

// maxFlow is the maximum flow when the demand edges are sized for flow f,
// with an extra edge (or extra capacity on an existing one) from extra to
// the sink when extra > 1. gonum's Dinic gives the value only, no flow
// and no residual graph; minCut derives the cut from values.
func (n *flowNet) maxFlow(f float64, extra int, extraCap float64) float64 {
	g := simple.NewWeightedDirectedGraph(0, 0)
	for i := range n.nodes {
		g.AddNode(simple.Node(i))
	}
	w := make(map[[2]int]float64, len(n.edges)+1)
	for _, e := range n.edges {
		w[[2]int{e.from, e.to}] += e.capAt(f)
	}
	if extra > sink {
		w[[2]int{extra, sink}] += extraCap
	}
	for k, c := range w {
		g.SetWeightedEdge(simple.WeightedEdge{F: simple.Node(k[0]), T: simple.Node(k[1]), W: c})
	}
	return network.MaxFlowDinic(g, simple.Node(source), simple.Node(sink), -1)
}

// minCut returns the maximum flow for flow f and the minimum cut nearest
// the source: inSource[v] is true for the nodes on its source side.
//
// Why this works from values alone: the source sides of the minimum cuts
// are closed under intersection, so there is a smallest one, and a node v
// lies in it exactly when forcing v to the sink side (an edge v -> sink of
// more than the whole network's capacity) raises the maximum flow. That
// costs one max-flow per node, on graphs of a dozen nodes.
func (n *flowNet) minCut(f float64) (value float64, inSource []bool) {
	value = n.maxFlow(f, 0, 0)
	big := 1.0
	for _, e := range n.edges {
		big += e.capAt(f)
	}
	inSource = make([]bool, len(n.nodes))
	inSource[source] = true
	for v := sink + 1; v < len(n.nodes); v++ {
		if n.maxFlow(f, v, big) > value+relTol*math.Max(1, value) {
			inSource[v] = true
		}
	}
	return value, inSource
}

// cutEdges lists the edges that cross a cut from its source side.
func (n *flowNet) cutEdges(inSource []bool) []flowEdge {
	var out []flowEdge
	for _, e := range n.edges {
		if inSource[e.from] && !inSource[e.to] {
			out = append(out, e)
		}
	}
	return out
}

// lockstepMax is the largest f whose demands the network carries in full
// (maximum flow = f), with the cut that stops it growing. Dinkelbach's
// iteration: at a flow f the network cannot carry, its minimum cut C has
// capacity a·f + b (a: the demand shares C cuts, b: its other edges), and
// no flow above b/(1−a) fits through C; that is the next f. Each step
// moves to a different cut and f only falls, so it ends after at most as
// many steps as there are cuts, in practice two or three.
func (n *flowNet) lockstepMax(upper float64) (float64, []flowEdge) {
	f := upper
	var cut []flowEdge
	for range 64 {
		value, side := n.minCut(f)
		cut = n.cutEdges(side)
		if value >= f*(1-relTol) {
			_, side = n.minCut(f * (1 + 1e-6))
			return f, n.cutEdges(side)
		}
		var a, b float64
		for _, e := range cut {
			a += e.perFlow
			b += e.cap
		}
		if a >= 1 { // cannot happen: the cut would carry f
			return f, cut
		}
		next := b / (1 - a)
		if next >= f {
			return f, cut
		}
		f = next
	}
	return f, cut
}
