package wire

import (
	"bytes"
	"testing"
)

// FuzzReader feeds arbitrary bytes to the frame reader and every body
// decoder: each must return an error or a value, never panic or hang.
func FuzzReader(f *testing.F) {
	var pre [DataPrefixSize]byte
	d := Data{Table: 1, Kind: KeysExplicit, Count: 2, Width: 1, Keys: []uint64{3, 4}, Vals: F32Bytes([]float32{1, 2})}
	var seed bytes.Buffer
	NewFrame(Header{Type: TPush, Epoch: 1, ReqID: 1}, d.Parts(&pre)...).WriteTo(&seed)
	f.Add(seed.Bytes())
	sp := Data{Table: 1, Kind: KeysRange, Enc: EncSparse, Count: 4, Width: 1, Lo: 0, Hi: 64,
		Vals: EncodeValues(EncSparse, []float32{0, 1, 0, 2}, nil)}
	seed.Reset()
	NewFrame(Header{Type: TPushPull, Epoch: 1, ReqID: 2}, sp.Parts(&pre)...).WriteTo(&seed)
	f.Add(seed.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(bytes.NewReader(b), 1<<16)
		for {
			h, err := r.Next()
			if err != nil {
				return
			}
			p, err := r.Payload(h)
			if err != nil {
				return
			}
			switch h.Type {
			case TPush, TPushPull, TPull:
				d, err := ParseData(p, h.Type != TPull)
				if err == nil && h.Type != TPull && d.NumValues() <= 1<<16 {
					_ = DecodeValues(d.Enc, d.Vals, make([]float32, d.NumValues()))
				}
			case TClock:
				_, _ = ParseClock(p)
			case THello:
				_, _ = ParseHello(p)
			case TError:
				_, _, _ = ParseError(p)
			case TReply:
				_, _, _ = ParseReply(p)
			case TReplicate:
				_, _ = ParseReplicate(p)
			}
		}
	})
}
