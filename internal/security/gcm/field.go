package gcm

import "encoding/binary"

// Key setup runs once per key (a connection's direction, or a rekey), so
// it is plain Go written for clarity, not speed.

// expandKey128 writes AES-128's 11 round keys (FIPS 197 §5.2) as the
// 16-byte strings AESENC takes.
func expandKey128(key []byte, rk *[11 * 16]byte) {
	copy(rk[:16], key)
	rcon := byte(1)
	for i := 16; i < len(rk); i += 4 {
		t := [4]byte(rk[i-4 : i])
		if i%16 == 0 {
			t = [4]byte{sbox(t[1]) ^ rcon, sbox(t[2]), sbox(t[3]), sbox(t[0])}
			rcon = xtime(rcon)
		}
		for j := range 4 {
			rk[i+j] = rk[i-16+j] ^ t[j]
		}
	}
}

func xtime(b byte) byte {
	if b&0x80 != 0 {
		return b<<1 ^ 0x1b
	}
	return b << 1
}

func gmul8(a, b byte) byte {
	var p byte
	for b != 0 {
		if b&1 != 0 {
			p ^= a
		}
		a, b = xtime(a), b>>1
	}
	return p
}

// sbox is AES's S-box computed, not tabled: the inverse in GF(2^8)
// (as b^254) followed by the affine map.
func sbox(b byte) byte {
	inv, p := byte(1), b
	for e := 254; e > 0; e >>= 1 {
		if e&1 != 0 {
			inv = gmul8(inv, p)
		}
		p = gmul8(p, p)
	}
	rot := func(x byte, n uint) byte { return x<<n | x>>(8-n) }
	return inv ^ rot(inv, 1) ^ rot(inv, 2) ^ rot(inv, 3) ^ rot(inv, 4) ^ 0x63
}

// elem is a GF(2^128) element in GCM's own order: bit 0 of hi (its most
// significant) is the coefficient of x^0.
type elem struct{ hi, lo uint64 }

func load(b *[16]byte) elem {
	return elem{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// mul is the reference multiplication of SP 800-38D, Algorithm 1.
func mul(x, y elem) elem {
	var z elem
	v := y
	for i := range 128 {
		w := x.hi
		if i >= 64 {
			w = x.lo
		}
		if w>>(63-uint(i%64))&1 != 0 {
			z.hi ^= v.hi
			z.lo ^= v.lo
		}
		carry := v.lo & 1
		v.lo = v.lo>>1 | v.hi<<63
		v.hi >>= 1
		if carry != 0 {
			v.hi ^= 0xe1 << 56
		}
	}
	return z
}

// xInverse is x^-1 = x^127 + x^6 + x + 1 (x times it is x^128 + x^7 +
// x^2 + x, which is 1 modulo GCM's polynomial).
var xInverse = elem{hi: 1<<63 | 1<<62 | 1<<57, lo: 1}

// powersOfH fills t[i] with H^(32-i) * x^-1, byte-reversed.
func powersOfH(h *[16]byte, t *[32][16]byte) {
	hh := load(h)
	p := hh
	for i := 31; i >= 0; i-- {
		q := mul(p, xInverse)
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], q.hi)
		binary.BigEndian.PutUint64(b[8:], q.lo)
		for j := range 16 {
			t[i][j] = b[15-j]
		}
		p = mul(p, hh)
	}
}
