//go:build !unix

package bench

import "time"

// processCPU is not measured here: CPU figures read 0.
func processCPU() time.Duration { return 0 }
