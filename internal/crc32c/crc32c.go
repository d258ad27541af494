// Package crc32c computes CRC32C (Castagnoli), the checksum of every data-plane
// frame and checkpoint block, with the same results as hash/crc32's
// Castagnoli table. On amd64 with AVX-512 and VPCLMULQDQ, a long buffer is
// folded 256 bytes a round in carry-less multiplications (crc32c_amd64.s);
// hash/crc32's three streams of the CRC32 instruction run at about 10 GB/s
// on memory the cache does not hold, the folds at the memory's speed
// (docs/design/dataplane.md, "CRC32C at the memory's speed").
package crc32c

import "hash/crc32"

var table = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C of p.
func Checksum(p []byte) uint32 { return Update(0, p) }

// Update returns the CRC32C of the bytes summed into crc followed by p,
// as crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), p) does.
func Update(crc uint32, p []byte) uint32 {
	if n := foldHead(len(p)); n > 0 {
		crc = ^fold(^crc, p[:n])
		p = p[n:]
	}
	return crc32.Update(crc, table, p)
}
