package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"testing"
)

func frameBytes(t testing.TB, h Header, parts ...[]byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := NewFrame(h, parts...).WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestFrameRoundTrip(t *testing.T) {
	keys := []uint64{1, 5, 9}
	vals := []float32{0.5, -1, 2}
	d := Data{Table: 3, Worker: 1, Clock: 7, Kind: KeysCache, CacheID: 42, Count: 3, Width: 1, Keys: keys, Vals: F32Bytes(vals)}
	var pre [DataPrefixSize]byte
	raw := frameBytes(t, Header{Type: TPush, Epoch: 9, ReqID: 77}, d.Parts(&pre)...)
	r := NewReader(bytes.NewReader(raw), 0)
	h, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if h.Type != TPush || h.Epoch != 9 || h.ReqID != 77 || int(h.Len) != len(raw)-HeaderSize {
		t.Fatalf("header %+v", h)
	}
	p, err := r.Payload(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseData(p, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.Table != 3 || got.Worker != 1 || got.Clock != 7 || got.Kind != KeysCache || got.CacheID != 42 || got.Count != 3 {
		t.Fatalf("data %+v", got)
	}
	if !equalU64(got.Keys, keys) || !equalF32(BytesF32(got.Vals), vals) {
		t.Fatalf("keys %v vals %v", got.Keys, BytesF32(got.Vals))
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after last frame: %v, want EOF", err)
	}
}

func TestFrameCorruption(t *testing.T) {
	good := frameBytes(t, Header{Type: TPull, Epoch: 1, ReqID: 2}, bytes.Repeat([]byte{7}, 64))
	cases := []struct {
		name string
		mod  func([]byte) []byte
		want error
	}{
		{"bad_magic", func(b []byte) []byte { b[0] ^= 0xff; return b }, ErrBadMagic},
		{"bad_version", func(b []byte) []byte { b[2] = 9; return b }, ErrVersion},
		{"unknown_type", func(b []byte) []byte { b[3] = 99; return b }, ErrCorrupt},
		{"reserved_bits", func(b []byte) []byte { b[6] = 1; return b }, ErrCorrupt},
		{"oversized", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[24:], 1<<30); return b }, ErrTooLarge},
		{"payload_bit_flip", func(b []byte) []byte { b[HeaderSize+10] ^= 1; return b }, ErrChecksum},
		{"header_bit_flip", func(b []byte) []byte { b[9] ^= 1; return b }, ErrChecksum},
		{"torn_header", func(b []byte) []byte { return b[:HeaderSize-3] }, ErrTruncated},
		{"torn_payload", func(b []byte) []byte { return b[:len(b)-1] }, ErrTruncated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.mod(bytes.Clone(good))
			r := NewReader(bytes.NewReader(b), 0)
			h, err := r.Next()
			if err == nil {
				_, err = r.Payload(h)
			}
			if !errors.Is(err, c.want) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestParseDataRejects(t *testing.T) {
	d := Data{Table: 1, Kind: KeysExplicit, Count: 2, Width: 2, Keys: []uint64{1, 2}, Vals: F32Bytes([]float32{1, 2, 3, 4})}
	var pre [DataPrefixSize]byte
	good := bytes.Join(d.Parts(&pre), nil)
	aligned := func(b []byte) []byte { // payloads come 8-byte aligned from Reader
		w := make([]uint64, (len(b)+7)/8)
		return copy2(U64Bytes(w)[:len(b)], b)
	}
	if _, err := ParseData(aligned(good), true); err != nil {
		t.Fatalf("good message refused: %v", err)
	}
	cases := map[string]func([]byte) []byte{
		"short_prefix":   func(b []byte) []byte { return b[:20] },
		"keys_truncated": func(b []byte) []byte { return b[:DataPrefixSize+8] },
		"vals_short":     func(b []byte) []byte { return b[:len(b)-4] },
		"vals_long":      func(b []byte) []byte { return append(b, 0, 0, 0, 0) },
		"zero_width":     func(b []byte) []byte { binary.LittleEndian.PutUint32(b[28:], 0); return b },
		"bad_kind":       func(b []byte) []byte { b[16] = 9; return b },
		"bad_enc":        func(b []byte) []byte { b[17] = 9; return b },
		"huge_count":     func(b []byte) []byte { binary.LittleEndian.PutUint32(b[24:], math.MaxUint32); return b },
		"ancestors":      func(b []byte) []byte { b[18] = 200; return b },
	}
	for name, mod := range cases {
		if _, err := ParseData(aligned(mod(bytes.Clone(good))), true); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", name, err)
		}
	}
	pull := Data{Table: 1, Kind: KeysRange, Count: 10, Width: 1, Lo: 5, Hi: 10}
	if _, err := ParseData(aligned(bytes.Join(pull.Parts(&pre), nil)), false); !errors.Is(err, ErrCorrupt) {
		t.Errorf("range of 5 keys claiming 10: got %v", err)
	}
}

func copy2(dst, src []byte) []byte { copy(dst, src); return dst }

func TestEncodings(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]float32, 1000)
	for i := range v {
		if rng.IntN(10) == 0 {
			v[i] = float32(rng.NormFloat64())
		}
	}
	for _, enc := range []Enc{EncRaw, EncSparse, EncFP16, EncInt8} {
		b := EncodeValues(enc, v, nil)
		got := make([]float32, len(v))
		if err := DecodeValues(enc, bytes.Clone(b), got); err != nil {
			t.Fatalf("enc %d: %v", enc, err)
		}
		var maxAbs float32
		for _, x := range v {
			maxAbs = max(maxAbs, float32(math.Abs(float64(x))))
		}
		for i := range v {
			err := math.Abs(float64(got[i] - v[i]))
			var tol float64
			switch enc {
			case EncFP16:
				tol = math.Abs(float64(v[i]))/1024 + 1e-7
			case EncInt8:
				tol = float64(maxAbs) / 127 / 2 * 1.0001
			}
			if err > tol {
				t.Fatalf("enc %d: value %d: %v became %v", enc, i, v[i], got[i])
			}
		}
	}
	if !SparseWorthIt(v) {
		t.Error("10% dense vector: sparse not chosen")
	}
}

func TestF16Exhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			if back := F32ToF16(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#x came back as %#x", h, back)
			}
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("half %#x -> %v -> %#x", h, f, back)
		}
	}
	if F32ToF16(1e6) != 0x7c00 || F32ToF16(-1e6) != 0xfc00 {
		t.Error("overflow does not become infinity")
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	var cb [ClockSize]byte
	Clock{Worker: 4, Clock: 99}.Put(&cb)
	if c, err := ParseClock(cb[:]); err != nil || c.Worker != 4 || c.Clock != 99 {
		t.Fatalf("clock %+v %v", c, err)
	}
	if h, err := ParseHello(AppendHello(nil, Hello{Worker: 2, Node: "w-2"})); err != nil || h.Worker != 2 || h.Node != "w-2" {
		t.Fatalf("hello %+v %v", h, err)
	}
	if c, m, err := ParseError(AppendError(nil, CodeStaleEpoch, "old")); err != nil || c != CodeStaleEpoch || m != "old" {
		t.Fatalf("error %v %q %v", c, m, err)
	}
	var rb [ReplyPrefixSize]byte
	PutReply(&rb, 3)
	if n, v, err := ParseReply(append(rb[:], 1, 2, 3, 4)); err != nil || n != 3 || len(v) != 4 {
		t.Fatalf("reply %d %v %v", n, v, err)
	}
	for _, bad := range [][]byte{nil, {1, 2, 3}, cb[:15]} {
		if _, err := ParseClock(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("clock %v: %v", bad, err)
		}
		if _, err := ParseHello(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("hello %v: %v", bad, err)
		}
		if _, _, err := ParseError(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("error %v: %v", bad, err)
		}
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReplicateRoundTrip(t *testing.T) {
	m := Replicate{
		Pairs:    []Pair{{Client: 1, Seq: 2}, {Client: 3, Seq: 1 << 40, Acked: 99, Table: 7, Slots: []uint64{0, 2, 7, 8, 1 << 50, 1<<50 + 3}}},
		Replace:  []Replace{{Table: 1, Slots: []uint64{0, 1}}, {Table: 2, Slots: []uint64{4, 6, 9, 10}}},
		Deferred: []Deferred{{Pair: Pair{Client: 9, Seq: 4, Acked: 2, Table: 1}, Clock: 17, Worker: 3, Keys: []uint64{8, 70}, Vals: []float32{1, 2, 3, 4, 5, 6}}},
		More:     true,
		States: []State{
			{Table: 1, Stride: 3, Keys: []uint64{5, 9}, Floats: []float32{1, 2, 3, 4, 5, 6}},
			{Table: 2, Stride: 1, Lo: 100, N: 3, Floats: []float32{7, 8, 9}},
		},
	}
	raw := frameBytes(t, Header{Type: TReplicate, Epoch: 1, ReqID: 5}, m.Parts()...)
	r := NewReader(bytes.NewReader(raw), 0)
	h, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Payload(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseReplicate(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pairs) != 2 || len(got.States) != 2 || len(got.Replace) != 2 || !got.More {
		t.Fatalf("%+v", got)
	}
	if len(got.Deferred) != 1 {
		t.Fatalf("deferred pushes %+v", got.Deferred)
	}
	if d, want := got.Deferred[0], m.Deferred[0]; d.Pair.Client != want.Pair.Client || d.Pair.Seq != want.Pair.Seq || d.Pair.Acked != want.Pair.Acked || d.Pair.Table != want.Pair.Table || d.Clock != want.Clock || d.Worker != want.Worker || !equalU64(d.Keys, want.Keys) || !equalF32(d.Vals, want.Vals) {
		t.Fatalf("deferred push %+v, want %+v", d, want)
	}
	for i, want := range m.Replace {
		if g := got.Replace[i]; g.Table != want.Table || !equalU64(g.Slots, want.Slots) {
			t.Fatalf("replaced set %d: got %+v, want %+v", i, g, want)
		}
	}
	for i, want := range m.Pairs {
		if g := got.Pairs[i]; g.Client != want.Client || g.Seq != want.Seq || g.Acked != want.Acked || g.Table != want.Table || !equalU64(g.Slots, want.Slots) {
			t.Fatalf("pair %d: got %+v, want %+v", i, g, want)
		}
	}
	if !equalU64(got.States[0].Keys, []uint64{5, 9}) || !equalF32(got.States[0].Floats, m.States[0].Floats) {
		t.Fatalf("state 0 %+v", got.States[0])
	}
	if s := got.States[1]; s.Keys != nil || s.Lo != 100 || s.N != 3 || !equalF32(s.Floats, []float32{7, 8, 9}) {
		t.Fatalf("state 1 %+v", s)
	}
	for cut := 1; cut < len(p); cut += 7 {
		w := make([]uint64, (cut+7)/8)
		if _, err := ParseReplicate(copy2(U64Bytes(w)[:cut], p[:cut])); err == nil {
			t.Fatalf("truncated at %d of %d: accepted", cut, len(p))
		}
	}
}
