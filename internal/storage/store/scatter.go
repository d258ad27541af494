package store

import (
	"sync"
	"unsafe"
)

// minScatter is the shortest key list that visitByStripe takes: a list of
// random keys rarely has two neighbours in one stripe group, so visit
// would lock a stripe and look one block up per key, and the lookups'
// cache misses could not overlap (a lock is a barrier). 10,000 random keys
// of 10 million cost about 450 ns a key that way, most of it map lookups.
const minScatter = 256

// maxBatch bounds the pieces visitBatch takes at once. A list of random
// keys gives a stripe about one piece in 256; looked up (and touched)
// together, their cache misses overlap, so the more a batch holds, the
// fewer times per key a visit waits for memory: a dependent miss costs
// about 265 ns on this host, and 16 independent ones barely more than one.
const maxBatch = 64

// scratchPieces recycles visitByStripe's piece lists.
var scratchPieces = sync.Pool{New: func() any { return new([]piece) }}

// visitByStripe is visit for a long key list: it cuts the list into
// pieces, sorts them by stripe (a counting sort, stable, so that each
// stripe's pieces stay in key order), and visits each stripe's pieces in
// batches of up to maxBatch under one hold of its lock, their blocks looked
// up together. Callers' fn only touch their piece's own keys and values,
// so the order across stripes does not matter.
func (t *Table) visitByStripe(src pieces, mode access, fn func(block, piece), flush func()) {
	bp := scratchPieces.Get().(*[]piece)
	all := (*bp)[:0]
	var counts [stripes + 1]int
	// src is a key list (visit): cut it here, without pieces.next's
	// tests of which kind of source it is, per piece.
	for i := 0; i < len(src.keys); {
		p := keyPiece(src.keys, i)
		all = append(all, p)
		counts[p.slot/groupSlots%stripes+1]++
		i += p.n
	}
	for i := 1; i <= stripes; i++ {
		counts[i] += counts[i-1]
	}
	n := len(all)
	if cap(all) < 2*n {
		all = append(all[:cap(all)], make([]piece, 2*n-cap(all))...)
	}
	all = all[:2*n]
	sorted := all[n:]
	pos := counts
	for _, p := range all[:n] {
		si := p.slot / groupSlots % stripes
		sorted[pos[si]] = p
		pos[si]++
	}
	var blocks [maxBatch]block
	var dgs [maxBatch]*denseGroup
	var ents [maxBatch]int32
	var addrs [3 * maxBatch]unsafe.Pointer
	f := found{blocks[:], dgs[:], ents[:], addrs[:]}
	for si := range stripes {
		ps := sorted[counts[si]:counts[si+1]]
		for len(ps) > 0 {
			m := min(len(ps), maxBatch)
			t.visitBatch(&t.st[si], ps[:m], &f, mode, fn, flush)
			ps = ps[m:]
		}
	}
	// A piece holds no pointers: the list goes back as it is.
	*bp = all[:0]
	scratchPieces.Put(bp)
}
