package data

import (
	"bytes"
	"hash/fnv"
	"hash/maphash"
	"math"
	"slices"
)

// IDs numbers distinct string ids 0, 1, 2, ... in the order they are
// first added: the dictionary of a ratings column whose ids are not all
// numbers (Amazon's user ids, Book-Crossing's ISBNs). Numbering by order
// of first appearance makes it a function of the file alone, so every
// worker that reads the same training file numbers its ids alike
// without talking to the others; the hash below only finds ids, it never
// decides a number.
//
// A million ids cost their bytes plus about 12 bytes each: the ids sit
// back to back in one array, each with an end offset, and an open
// addressing table of numbers finds them. A map[string]uint32 costs a
// string header, an allocation and a map entry each, some 60 bytes more.
type IDs struct {
	text  []byte   // every id's bytes, back to back
	ends  []uint32 // id n is text[ends[n-1]:ends[n]]
	slots []uint32 // number + 1 of the id hashed there; 0: empty
	seed  maphash.Seed
}

// Unseen is the number a ratings file read with another file's
// dictionaries (ReadRatingsWith) gives an id the dictionary lacks: a user
// or item the training data never rated.
const Unseen uint32 = math.MaxUint32

// maxIDText bounds the ids' bytes, whose offsets are 32-bit.
const maxIDText = math.MaxUint32

// Len returns the number of distinct ids.
func (d *IDs) Len() int { return len(d.ends) }

// ID returns the id numbered n.
func (d *IDs) ID(n uint32) string { return string(d.bytes(n)) }

func (d *IDs) bytes(n uint32) []byte {
	start := uint32(0)
	if n > 0 {
		start = d.ends[n-1]
	}
	return d.text[start:d.ends[n]]
}

// Digest returns a 64-bit FNV-1a hash of d's ids in the order of their
// numbers, which two dictionaries share only if they number alike: the
// workers of a job report it (mf's Report), so that a numbering that
// differs between processes shows.
func (d *IDs) Digest() uint64 {
	h := fnv.New64a()
	for n := range uint32(d.Len()) {
		h.Write(d.bytes(n))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// Lookup returns the number of id, if d holds it.
func (d *IDs) Lookup(id []byte) (uint32, bool) {
	if len(d.slots) == 0 {
		return 0, false
	}
	for s := d.slot(id); ; s = (s + 1) & uint64(len(d.slots)-1) {
		n := d.slots[s]
		if n == 0 {
			return 0, false
		}
		if bytes.Equal(d.bytes(n-1), id) {
			return n - 1, true
		}
	}
}

// Add returns the number of id, numbering it next if d does not hold it
// yet. It reports false, adding nothing, when the ids' bytes would pass
// 4 GiB.
func (d *IDs) Add(id []byte) (uint32, bool) {
	if n, ok := d.Lookup(id); ok {
		return n, true
	}
	if uint64(len(d.text))+uint64(len(id)) > maxIDText {
		return 0, false
	}
	// At most 70% full: linear probing's hits then take about two probes.
	if 10*(len(d.ends)+1) > 7*len(d.slots) {
		d.grow()
	}
	n := uint32(len(d.ends))
	d.text = append(d.text, id...)
	d.ends = append(d.ends, uint32(len(d.text)))
	d.place(n)
	return n, true
}

func (d *IDs) slot(id []byte) uint64 {
	return maphash.Bytes(d.seed, id) & uint64(len(d.slots)-1)
}

// place puts number n in the first free slot from its id's hash.
func (d *IDs) place(n uint32) {
	s := d.slot(d.bytes(n))
	for d.slots[s] != 0 {
		s = (s + 1) & uint64(len(d.slots)-1)
	}
	d.slots[s] = n + 1
}

func (d *IDs) grow() {
	if len(d.slots) == 0 {
		d.seed = maphash.MakeSeed()
		d.slots = make([]uint32, 16)
		return
	}
	d.slots = make([]uint32, 2*len(d.slots))
	for n := range uint32(len(d.ends)) {
		d.place(n)
	}
}

// trim drops the spare capacity that appending left in d's arrays, up to
// half of each, once no more ids will be added.
func (d *IDs) trim() {
	d.text = bytes.Clone(d.text)
	d.ends = slices.Clone(d.ends)
}
