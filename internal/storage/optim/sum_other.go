//go:build !amd64

package optim

// sumHead is 0 where there is no vector kernel: sum adds everything in Go,
// and sumKernel is never called.
func sumHead(int) int { return 0 }

func sumKernel(v, g []float32) bool { panic("optim: no vector kernel on this architecture") }

// sumRun is never called where there is no vector kernel: SumKeys declines
// and the caller takes Apply.
func sumRun(v, g []float32) int { panic("optim: no vector kernel on this architecture") }

// sumLanes is the round a vector kernel would take; without one SumKeys
// declines before it uses it.
const sumLanes = 32
