//go:build !linux

package drill

func processCPUSeconds(int) (float64, error) { return 0, ErrNoCPUTimes }

func hostCPU() (float64, int, error) { return 0, 0, ErrNoCPUTimes }
