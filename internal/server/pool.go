package server

import (
	"math/bits"
	"sync"
)

// Reply buffers come from power-of-two size classes, so that a server
// answering pulls of a steady size allocates nothing in the steady state.
var bufPools [40]sync.Pool

func getBuf(n int) *[]float32 {
	c := bits.Len(uint(max(n, 1) - 1))
	if b, ok := bufPools[c].Get().(*[]float32); ok {
		return b
	}
	b := make([]float32, 1<<c)
	return &b
}

func putBuf(b *[]float32) {
	c := bits.Len(uint(cap(*b) - 1))
	if 1<<c == cap(*b) {
		bufPools[c].Put(b)
	}
}

// Payload buffers are []uint64 so that keys and values in them are aligned.
var payloadPools [40]sync.Pool

func getPayload(n int) *[]uint64 {
	words := max((n+7)/8, 1)
	c := bits.Len(uint(words - 1))
	if b, ok := payloadPools[c].Get().(*[]uint64); ok {
		return b
	}
	b := make([]uint64, 1<<c)
	return &b
}

func putPayload(b *[]uint64) {
	c := bits.Len(uint(cap(*b) - 1))
	if 1<<c == cap(*b) {
		payloadPools[c].Put(b)
	}
}
