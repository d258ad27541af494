//go:build !amd64

package store

import "unsafe"

// prefetch loads a byte at each address: without a prefetch instruction,
// independent loads still put the misses in flight together, though each
// holds the processor's reorder buffer until it returns.
//
//go:noinline
func prefetch(addrs []unsafe.Pointer) (x byte) {
	for _, a := range addrs {
		x ^= *(*byte)(a)
	}
	return x
}
