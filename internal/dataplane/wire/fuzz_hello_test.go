package wire

import (
	"bytes"
	"testing"
)

// FuzzHello feeds arbitrary bytes to the hello decoder, which reads the
// first frame of every connection, from any peer that reaches a server:
// it must return an error or a hello that encodes back to the same bytes.
// The corpus is in testdata/fuzz/FuzzHello.
func FuzzHello(f *testing.F) {
	f.Add(AppendHello(nil, Hello{Worker: 2, Client: 7, Node: "w-2"}))
	f.Add(AppendHello(nil, Hello{Worker: NoWorker, Role: RoleReplica, Node: "server-0"}))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 17))
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := ParseHello(p)
		if err != nil {
			return
		}
		if back := AppendHello(nil, h); !bytes.Equal(back, p) {
			t.Fatalf("hello %+v parsed from %x encodes as %x", h, p, back)
		}
		// The same bytes as the first frame of a stream.
		var s bytes.Buffer
		NewFrame(Header{Type: THello}, p).WriteTo(&s)
		r := NewReader(&s, 4<<10)
		fh, err := r.Next()
		if err != nil || fh.Type != THello {
			t.Fatalf("frame of a valid hello: %v %v", fh, err)
		}
		q, err := r.Payload(fh)
		if err != nil || !bytes.Equal(q, p) {
			t.Fatalf("payload of a valid hello: %x %v", q, err)
		}
	})
}
