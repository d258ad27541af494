package crc32c

import "golang.org/x/sys/cpu"

// minFold is the shortest buffer the fold takes; below it hash/crc32's
// CRC32 instructions are as fast (BenchmarkUpdate).
const minFold = 512

// hasFold is read once: the feature set does not change while we run.
var hasFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE42

// foldHead returns how many bytes at the head of an n-byte buffer the fold
// takes: a multiple of 16, or none.
func foldHead(n int) int {
	if !hasFold || n < minFold {
		return 0
	}
	return n &^ 15
}

// fold returns the CRC32C register after p, starting from state, without
// the inversions at either end; len(p) is what foldHead returned.
func fold(state uint32, p []byte) uint32 { return foldAVX512(state, p) }

// foldAVX512 folds p in four 64-byte accumulators (crc32c_amd64.s).
//
//go:noescape
func foldAVX512(state uint32, p []byte) uint32
