package optim

import "testing"

// The same with the vector kernel switched off, so that the Go path every
// other architecture takes is tested here too.
func TestSumMatchesReferenceWithoutKernel(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no vector kernel on this machine: the other test already took the Go path")
	}
	hasAVX2 = false
	t.Cleanup(func() { hasAVX2 = true })
	TestSumMatchesReference(t)
}
