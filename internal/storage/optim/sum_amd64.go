package optim

import "golang.org/x/sys/cpu"

// sumLanes is how many floats one round of sumAVX2 takes.
const sumLanes = 32

// hasAVX2 is read once: the feature set does not change while we run.
var hasAVX2 = cpu.X86.HasAVX2

// sumHead returns how many floats at the head of an n-float vector the
// vector kernel adds: a whole number of its rounds, or none without AVX2.
func sumHead(n int) int {
	if !hasAVX2 {
		return 0
	}
	return n &^ (sumLanes - 1)
}

// sumKernel adds g to v if no sum is Inf or NaN, and reports whether it
// did; len(v) is what sumHead returned.
func sumKernel(v, g []float32) bool { return sumAVX2(v, g[:len(v)]) }

// sumAVX2 is sumKernel 8 floats an instruction (sum_amd64.s).
//
//go:noescape
func sumAVX2(v, g []float32) bool

// sumRun adds g to v whole rounds at a time while every sum is finite and
// returns how many floats it added (see sumRunAVX2); only where sumHead
// gives the kernel a head.
func sumRun(v, g []float32) int { return sumRunAVX2(v, g[:len(v)]) }

// sumRunAVX2 is sumRun 8 floats an instruction, in one pass (sum_amd64.s).
//
//go:noescape
func sumRunAVX2(v, g []float32) int
