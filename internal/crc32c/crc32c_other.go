//go:build !amd64

package crc32c

// foldHead takes nothing: hash/crc32 sums every byte elsewhere.
func foldHead(int) int { return 0 }

func fold(state uint32, _ []byte) uint32 { return state }
