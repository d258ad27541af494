package crc32c

// Shift moves a CRC32C over a fixed number of bytes (ShiftBy): the CRC of
// A then B is Shift(len(B)).Combine(CRC of A, CRC of B). Summing a
// buffer's pieces out of order (say, every run of a vector in the order
// of its memory, each run to the frame that carries it) then costs one
// carry-less multiplication per piece instead of a second pass.
type Shift uint32

// poly is CRC32C's polynomial, reflected.
const poly = 0x82F63B78

// x2n[k] is x^(2^k) modulo the polynomial, reflected (x^0 is 1<<31).
var x2n = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = mulmod(p, p)
	}
	return t
}()

// mulmod multiplies a and b modulo the polynomial, both reflected.
func mulmod(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ poly
		} else {
			b >>= 1
		}
	}
	return p
}

// ShiftBy returns the Shift over n bytes: x^(8n) modulo the polynomial.
func ShiftBy(n int) Shift {
	p := uint32(1) << 31 // x^0
	for k := 3; n > 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = mulmod(x2n[k&31], p)
		}
	}
	return Shift(p)
}

// Combine returns the CRC32C of A followed by B, given a = Update(0, A),
// b = Update(0, B) and s = ShiftBy(len(B)). It also continues a running
// sum: Update(a, B) for any a.
func (s Shift) Combine(a, b uint32) uint32 { return mulmod(uint32(s), a) ^ b }
