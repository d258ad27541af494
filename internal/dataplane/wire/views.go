package wire

import "unsafe"

// The data plane sends float32 and uint64 slices as byte views of their own
// memory: no copy and no per-element encoding. The payload is little-endian,
// which is the memory order of every platform Terrace supports (amd64,
// arm64); a big-endian build fails to compile here rather than corrupt data.
var _ = [1]struct{}{}[nativeBigEndian()]

func nativeBigEndian() int {
	x := uint16(1)
	return int(1 - *(*byte)(unsafe.Pointer(&x)))
}

// F32Bytes views v as bytes.
func F32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*4)
}

// U64Bytes views v as bytes.
func U64Bytes(v []uint64) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*8)
}

// BytesF32 views b as float32s; b must be 4-byte aligned and its length a
// multiple of 4 (payload buffers from Reader are 8-byte aligned).
func BytesF32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// BytesU64 views b as uint64s; b must be 8-byte aligned.
func BytesU64(b []byte) []uint64 {
	if len(b) < 8 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
}

func aligned(b []byte, n uintptr) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%n == 0
}
