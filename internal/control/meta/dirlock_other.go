//go:build !unix

package meta

// checkDirFree is a no-op where bbolt's lock is not flock.
func checkDirFree(string) error { return nil }
