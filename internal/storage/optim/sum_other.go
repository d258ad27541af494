//go:build !amd64

package optim

// sumHead is 0 where there is no vector kernel: sum adds everything in Go,
// and sumKernel is never called.
func sumHead(int) int { return 0 }

func sumKernel(v, g []float32) bool { panic("optim: no vector kernel on this architecture") }
