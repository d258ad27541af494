package data

import "math/bits"

// Shuffle permutes idx in place with a Fisher–Yates shuffle driven by a
// splitmix64 generator seeded with seed. The order depends only on seed and
// len(idx), never on the machine or the Go release: math/rand/v2 makes no
// such promise for its derived methods, and a replayed run must see the
// same minibatches.
func Shuffle(idx []int, seed uint64) {
	g := splitmix64(seed)
	for i := len(idx) - 1; i > 0; i-- {
		j := g.below(uint64(i) + 1)
		idx[i], idx[j] = idx[j], idx[i]
	}
}

type splitmix64 uint64

func (g *splitmix64) next() uint64 {
	*g += 0x9e3779b97f4a7c15
	x := uint64(*g)
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// below returns a uniform value in [0, n) by Lemire's multiply-and-reject,
// which avoids the bias of a plain modulo.
func (g *splitmix64) below(n uint64) uint64 {
	hi, lo := bits.Mul64(g.next(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(g.next(), n)
		}
	}
	return hi
}
