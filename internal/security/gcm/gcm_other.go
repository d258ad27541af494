//go:build !amd64

package gcm

const hasWide = false

func sealChunks(rk *[11 * 16]byte, ctr *[16]byte, dst, src *byte, n int, s *[16]byte, htab *[32][16]byte) {
	panic("gcm: no wide path on this architecture")
}

func openChunks(rk *[11 * 16]byte, ctr *[16]byte, dst, src *byte, n int, s *[16]byte, htab *[32][16]byte) {
	panic("gcm: no wide path on this architecture")
}

func ghashBlocks(s *[16]byte, h *[16]byte, b *byte, n int) {
	panic("gcm: no wide path on this architecture")
}
