package store

import (
	"math"

	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

// initValue writes key's initial value into v. Random values depend only on
// (Seed, key, index in v), never on the order keys were touched in, so that
// every server and every run creates the same value for the same key.
func (t *Table) initValue(v []float32, key uint64) { initWith(t.init, t.seed, v, key) }

// InitValue writes into v the value key of a table initialised by in
// holds until a push creates it: what a pull of it reads, and what a
// reader of a checkpoint, which holds only the keys pushes created,
// must take for the others.
func InitValue(in table.Init, v []float32, key uint64) {
	initWith(in, keyspace.Mix64(in.Seed), v, key)
}

// initWith is initValue under init, whose Seed mixes to seed.
func initWith(init table.Init, seed uint64, v []float32, key uint64) {
	// Element i draws from Mix64(base+i): a splitmix64 stream per key.
	base := keyspace.Mix64(seed ^ key)
	switch init.Kind {
	case table.Uniform:
		for i := range v {
			// 24 random bits make x exact in [-1,1), so the product stays below Scale.
			x := float32(keyspace.Mix64(base+uint64(i))>>40)*0x1p-23 - 1
			v[i] = x * init.Scale
		}
	case table.Normal:
		for i := range v {
			// Box–Muller; u1 is in (0,1] so the log is finite.
			u1 := (float64(keyspace.Mix64(base+2*uint64(i))>>11) + 1) * 0x1p-53
			u2 := float64(keyspace.Mix64(base+2*uint64(i)+1)>>11) * 0x1p-53
			z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
			v[i] = float32(z * float64(init.Scale))
		}
	default:
		clear(v)
	}
}
