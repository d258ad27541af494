package store

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/optim"
	"github.com/terrace-ml/terrace/table"
)

// stripes is the number of lock stripes of a table. Slot s is guarded by
// stripe s%stripes, so a dense run spreads over all of them and requests on
// different slots rarely share a lock.
const stripes = 256

// Table is one table's keys, values and optimizer state on one server. Its
// methods are safe for concurrent use. Value slices are flat: width floats
// per key, keys in the order given.
type Table struct {
	width  int
	planes int // the value plane and each optimizer state plane
	stride int // width * planes: floats per key
	upd    *optim.Updater
	init   table.Init
	seed   uint64 // keyspace.Mix64(init.Seed), hoisted out of per-key init
	st     [stripes]stripe
}

type stripe struct {
	mu     sync.RWMutex
	blocks map[uint64]block // by slot number
	keys   int64            // present keys
	bytes  int64            // heap bytes of the blocks' buffers
	// Keeps the hot fields of neighbouring stripes on separate cache lines.
	_ [64]byte
}

// New returns an empty table for spec, which the caller has validated.
func New(spec table.Spec) (*Table, error) {
	upd, err := optim.New(spec.Rule)
	if err != nil {
		return nil, fmt.Errorf("store: table %q: %w", spec.Name, err)
	}
	t := &Table{
		width:  spec.Width,
		planes: 1 + upd.StateSlots(),
		upd:    upd,
		init:   spec.Init,
		seed:   keyspace.Mix64(spec.Init.Seed),
	}
	t.stride = t.width * t.planes
	for i := range t.st {
		t.st[i].blocks = make(map[uint64]block)
	}
	return t, nil
}

func (t *Table) stripe(slot uint64) *stripe { return &t.st[slot%stripes] }

// Push applies vals to keys, which must be strictly increasing. A missing
// key is first created with the table's Init. It returns how many keys'
// updates were refused as non-finite; those keys keep their values.
func (t *Table) Push(keys []uint64, vals []float32) (refused int) {
	t.checkLen(len(keys), len(vals))
	st := make([][]float32, t.planes-1)
	for i := 0; i < len(keys); {
		slot := keyspace.Slot(keys[i])
		j := i + 1
		for j < len(keys) && keyspace.Slot(keys[j]) == slot {
			j++
		}
		refused += t.pushSlot(slot, keys[i:j], vals[i*t.width:j*t.width], st)
		i = j
	}
	return refused
}

func (t *Table) pushSlot(slot uint64, keys []uint64, vals []float32, st [][]float32) (refused int) {
	want := offsets(keys)
	s := t.stripe(slot)
	s.mu.Lock()
	b := t.insert(s, slot, s.blocks[slot], want)
	forRuns(keys, func(i, n int) {
		r := b.rank(uint(keys[i] % keyspace.SlotSize))
		refused += t.apply(b, r, n, vals[i*t.width:(i+n)*t.width], st)
	})
	s.mu.Unlock()
	return refused
}

// Pull copies the values of keys, which must be strictly increasing, into
// dst, first creating missing keys with the table's Init.
func (t *Table) Pull(keys []uint64, dst []float32) {
	t.checkLen(len(keys), len(dst))
	for i := 0; i < len(keys); {
		slot := keyspace.Slot(keys[i])
		j := i + 1
		for j < len(keys) && keyspace.Slot(keys[j]) == slot {
			j++
		}
		run := keys[i:j]
		out := dst[i*t.width : j*t.width]
		t.read(slot, offsets(run), func(b block) {
			vals := b.buf(t.stride)
			forRuns(run, func(i, n int) {
				r := b.rank(uint(run[i] % keyspace.SlotSize))
				copy(out[i*t.width:(i+n)*t.width], vals[r*t.width:])
			})
		})
		i = j
	}
}

// PushRun is Push for the len(vals)/width consecutive keys from lo, which
// must not run past the last key. Where the run covers whole blocks each
// block is updated in one call, which is what makes dense pushes fast.
func (t *Table) PushRun(lo uint64, vals []float32) (refused int) {
	st := make([][]float32, t.planes-1)
	t.runs(lo, len(vals), func(slot uint64, o, n, i int) {
		s := t.stripe(slot)
		b := t.insert(s, slot, s.blocks[slot], span(uint(o), uint(o+n)))
		refused += t.apply(b, b.rank(uint(o)), n, vals[i*t.width:(i+n)*t.width], st)
	})
	return refused
}

// PullRun is Pull for the len(dst)/width consecutive keys from lo, which
// must not run past the last key.
func (t *Table) PullRun(lo uint64, dst []float32) {
	t.runs(lo, len(dst), func(slot uint64, o, n, i int) {
		t.read(slot, span(uint(o), uint(o+n)), func(b block) {
			r := b.rank(uint(o))
			copy(dst[i*t.width:(i+n)*t.width], b.buf(t.stride)[r*t.width:])
		})
	})
}

// runs splits the run of floats/width keys from lo at slot boundaries and
// calls fn with each piece's slot, first offset in the slot, key count, and
// index of its first key in the run.
func (t *Table) runs(lo uint64, floats int, fn func(slot uint64, o, n, i int)) {
	if floats%t.width != 0 {
		panic(fmt.Sprintf("store: %d floats is not a whole number of width-%d values", floats, t.width))
	}
	keys := floats / t.width
	for i := 0; i < keys; {
		k := lo + uint64(i)
		o := int(k % keyspace.SlotSize)
		n := min(keyspace.SlotSize-o, keys-i)
		fn(keyspace.Slot(k), o, n, i)
		i += n
	}
}

// read calls fn under the stripe's read lock with slot's block once every
// key of want is present, creating the missing ones first.
func (t *Table) read(slot uint64, want uint64, fn func(block)) {
	s := t.stripe(slot)
	s.mu.RLock()
	if b := s.blocks[slot]; b.bits&want == want {
		fn(b)
		s.mu.RUnlock()
		return
	}
	s.mu.RUnlock()
	s.mu.Lock()
	// Another request may have created the keys in between; insert skips those.
	fn(t.insert(s, slot, s.blocks[slot], want))
	s.mu.Unlock()
}

// apply pushes g to the n keys of b from rank r, which are consecutive
// keys, and returns how many of them refused it.
func (t *Table) apply(b block, r, n int, g []float32, st [][]float32) (refused int) {
	buf := b.buf(t.stride)
	c := int(capKeys[b.count()]) * t.width
	lo, hi := r*t.width, (r+n)*t.width
	for p := range st {
		st[p] = buf[(p+1)*c+lo : (p+1)*c+hi]
	}
	if t.upd.Apply(buf[lo:hi], st, g) {
		return 0
	}
	if n == 1 {
		return 1
	}
	// Some key refused, and the failed call changed nothing: find which
	// ones, key by key.
	for k := range n {
		refused += t.apply(b, r+k, 1, g[k*t.width:(k+1)*t.width], st)
	}
	return refused
}

// insert adds the keys of add missing from b, slot's block in stripe s,
// with their initial values and zero state, and returns the updated block.
// The caller holds s.mu for writing.
func (t *Table) insert(s *stripe, slot uint64, b block, add uint64) block {
	add &^= b.bits
	if add == 0 {
		return b
	}
	nb := block{bits: b.bits | add, p: b.p}
	buf := b.buf(t.stride)
	if capKeys[nb.count()] != capKeys[b.count()] {
		s.bytes += allocBytes(int(capKeys[nb.count()])*t.stride) - allocBytes(len(buf))
		nbuf := make([]float32, int(capKeys[nb.count()])*t.stride)
		nb.p = &nbuf[0]
	}
	nbuf := nb.buf(t.stride)
	if b.bits != 0 {
		move(nbuf, buf, t.width, t.planes, b.bits, nb.bits)
	}
	c := int(capKeys[nb.count()]) * t.width
	base := keyspace.SlotStart(slot)
	for a := add; a != 0; a &= a - 1 {
		o := uint(bits.TrailingZeros64(a))
		at := nb.rank(o) * t.width
		t.initValue(nbuf[at:at+t.width], base+uint64(o))
		for p := 1; p < t.planes; p++ {
			clear(nbuf[p*c+at : p*c+at+t.width])
		}
	}
	s.keys += int64(bits.OnesCount64(add))
	s.blocks[slot] = nb
	return nb
}

// remove drops the keys of del from b, slot's block in stripe s. The caller
// holds s.mu for writing.
func (t *Table) remove(s *stripe, slot uint64, b block, del uint64) {
	del &= b.bits
	if del == 0 {
		return
	}
	s.keys -= int64(bits.OnesCount64(del))
	nb := block{bits: b.bits &^ del, p: b.p}
	buf := b.buf(t.stride)
	if nb.bits == 0 {
		s.bytes -= allocBytes(len(buf))
		delete(s.blocks, slot)
		return
	}
	if capKeys[nb.count()] != capKeys[b.count()] {
		s.bytes += allocBytes(int(capKeys[nb.count()])*t.stride) - allocBytes(len(buf))
		nbuf := make([]float32, int(capKeys[nb.count()])*t.stride)
		nb.p = &nbuf[0]
	}
	move(nb.buf(t.stride), buf, t.width, t.planes, b.bits, nb.bits)
	s.blocks[slot] = nb
}

func (t *Table) checkLen(keys, floats int) {
	if keys*t.width != floats {
		panic(fmt.Sprintf("store: %d keys of width %d need %d floats, got %d", keys, t.width, keys*t.width, floats))
	}
}

// offsets returns the bitmap of keys' offsets in their (common) slot.
func offsets(keys []uint64) uint64 {
	var m uint64
	for _, k := range keys {
		m |= 1 << (k % keyspace.SlotSize)
	}
	return m
}

// forRuns calls fn(i, n) for each maximal run keys[i:i+n] of consecutive
// keys; within one block such a run is one span of every plane.
func forRuns(keys []uint64, fn func(i, n int)) {
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j] == keys[j-1]+1 {
			j++
		}
		fn(i, j-i)
		i = j
	}
}
