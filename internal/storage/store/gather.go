package store

import (
	"math/bits"
	"unsafe"
)

// A push of random keys updates one key per block, and each key cost an
// Updater.Apply call of its own (a rank, the plane offsets, the rule's
// switch, the finiteness pass and the sum, for one float): a third of a
// cached sparse push's processor time. pushGathered instead collects the
// one-key pieces of each lock hold, copies their values and state into
// scratch planes side by side, applies the pushed values to all of them in
// one call (which the vector kernel takes 32 floats at a time) and copies
// the results back, still under the lock. Every rule updates each float
// from its own value, state and gradient alone (apply already hands the
// Updater runs of several keys), so the result is the same as key by key.

// gatherWidth and gatherPlanes bound the tables pushGathered takes: for
// wider values the per-key call is a small share of the work and copying
// them out and back would cost more than it saves. gatherPlanes covers
// every rule's state (Adam's three planes and the value).
const gatherWidth, gatherPlanes = 4, 4

// gathered is pushGathered's scratch for one lock hold's one-key pieces.
type gathered struct {
	n   int
	b   [maxBatch]block // each pending key's block
	r   [maxBatch]int   // its rank in the block
	i   [maxBatch]int   // its index in the push
	pl  [gatherPlanes][maxBatch * gatherWidth]float32
	g   [maxBatch * gatherWidth]float32
	cur [maxBatch]int // each pending key's value's offset in its buffer
	cap [maxBatch]int // floats from one plane to the next in its buffer
}

// pushGathered is Push for a long key list of a table of at most
// gatherWidth floats a key and gatherPlanes planes; st is Push's scratch.
func (t *Table) pushGathered(keys []uint64, vals []float32, st [][]float32) (refused int) {
	var g gathered
	fn := func(b block, p piece) {
		if p.n == 1 && g.n < maxBatch {
			g.b[g.n] = b
			g.r[g.n] = b.rank(uint(bits.TrailingZeros64(p.want)))
			g.i[g.n] = p.i
			g.n++
			return
		}
		refused += t.pushPiece(b, p, keys, vals, st)
	}
	flush := func() {
		if g.n > 0 {
			refused += t.applyGathered(&g, vals, st)
			g.n = 0
		}
	}
	t.visitFlush(pieces{keys: keys}, write, fn, flush)
	return refused
}

// applyGathered applies the pushed values of g's pending keys, all in one
// Apply call, and returns how many keys refused theirs. If any did, the
// call changed nothing, and each key is applied on its own instead, so
// that only the refusing ones keep their values.
func (t *Table) applyGathered(g *gathered, vals []float32, st [][]float32) (refused int) {
	w, n := t.width, g.n
	if w == 1 && t.planes == 1 {
		return t.applyGathered1(g, vals, st)
	}
	for k := range n {
		b := g.b[k]
		buf := b.buf(t.stride)
		c := int(capKeys[b.count()]) * w
		at := g.r[k] * w
		g.cur[k], g.cap[k] = at, c
		gi := g.i[k] * w
		for x := range w {
			g.g[k*w+x] = vals[gi+x]
		}
		for q := range t.planes {
			for x := range w {
				g.pl[q][k*w+x] = buf[q*c+at+x]
			}
		}
	}
	var gst [gatherPlanes - 1][]float32
	for q := 1; q < t.planes; q++ {
		gst[q-1] = g.pl[q][:n*w]
	}
	if t.upd.Apply(g.pl[0][:n*w], gst[:t.planes-1], g.g[:n*w]) {
		for k := range n {
			buf := g.b[k].buf(t.stride)
			at, c := g.cur[k], g.cap[k]
			for q := range t.planes {
				for x := range w {
					buf[q*c+at+x] = g.pl[q][k*w+x]
				}
			}
		}
		return 0
	}
	for k := range n {
		gi := g.i[k] * w
		refused += t.apply(g.b[k], g.r[k], 1, vals[gi:gi+w], st)
	}
	return refused
}

// applyGathered1 is applyGathered for one float a key and no optimizer
// state (a width-1 sum or SGD table, the commonest sparse tables), without
// the loops over width and planes: a key's value is the rank-th float of
// its buffer.
func (t *Table) applyGathered1(g *gathered, vals []float32, st [][]float32) (refused int) {
	n := g.n
	var at [maxBatch]*float32
	for k := range n {
		at[k] = (*float32)(unsafe.Add(unsafe.Pointer(g.b[k].p), 4*g.r[k]))
		g.g[k] = vals[g.i[k]]
		g.pl[0][k] = *at[k]
	}
	if t.upd.Apply(g.pl[0][:n], nil, g.g[:n]) {
		for k := range n {
			*at[k] = g.pl[0][k]
		}
		return 0
	}
	for k := range n {
		i := g.i[k]
		refused += t.apply(g.b[k], g.r[k], 1, vals[i:i+1], st)
	}
	return refused
}
