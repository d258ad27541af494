package server

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/table"
)

// start serves a one-server layout with one table on loopback.
func start(t *testing.T) (*Server, string) {
	t.Helper()
	spec := table.Spec{Name: "t", Width: 2}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{ID: "s0"})
	serve(t, s, ln, &layout.Layout{Version: 1, Epoch: 3, Workers: 1, Servers: []ring.Server{{ID: "s0", Addr: ln.Addr().String()}},
		Tables: []layout.Table{{ID: 1, Spec: spec}}})
	return s, ln.Addr().String()
}

// serve configures s with l and serves ln until the test ends.
func serve(t *testing.T, s *Server, ln net.Listener, l *layout.Layout) {
	t.Helper()
	if err := s.Configure(l); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// call sends one data frame and returns the reply's header and payload.
func call(t *testing.T, addr string, typ wire.Type, epoch uint64, d wire.Data) (wire.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := transport.Dial(ctx, addr, transport.DialOptions{Hello: wire.Hello{Worker: 0, Node: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type reply struct {
		h wire.Header
		p []byte
	}
	got := make(chan reply, 1)
	fail := make(chan error, 1)
	var pre [wire.DataPrefixSize]byte
	id := c.NextID()
	c.Call(wire.NewFrame(wire.Header{Type: typ, Epoch: epoch, ReqID: id}, d.Parts(&pre)...), id, &transport.Call{
		OnReply: func(h wire.Header, r *wire.Reader) error {
			p, err := r.Payload(h)
			got <- reply{h, bytes.Clone(p)}
			return err
		},
		OnFail: func(err error) { fail <- err },
	}, nil)
	select {
	case r := <-got:
		return r.h, r.p
	case err := <-fail:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("no reply")
	}
	return wire.Header{}, nil
}

func wantError(t *testing.T, h wire.Header, p []byte, code wire.Code) {
	t.Helper()
	if h.Type != wire.TError {
		t.Fatalf("got a %v frame, want error code %d", h.Type, code)
	}
	c, msg, err := wire.ParseError(p)
	if err != nil || c != code {
		t.Fatalf("error code %d %q (%v), want %d", c, msg, err, code)
	}
}

func TestRefusesStaleEpoch(t *testing.T) {
	_, addr := start(t)
	d := wire.Data{Table: 1, Kind: wire.KeysExplicit, Count: 1, Width: 2, Keys: []uint64{5}, Vals: wire.F32Bytes([]float32{1, 2})}
	h, p := call(t, addr, wire.TPush, 2, d)
	wantError(t, h, p, wire.CodeStaleEpoch)
	if h.Epoch != 3 {
		t.Fatalf("refusal carries epoch %d, want the server's 3", h.Epoch)
	}
	h, p = call(t, addr, wire.TPush, 3, d)
	if h.Type != wire.TReply {
		wantError(t, h, p, 0)
	}
}

func TestRefusesBadRequests(t *testing.T) {
	_, addr := start(t)
	cases := map[string]struct {
		d    wire.Data
		code wire.Code
	}{
		"unknown_table":  {wire.Data{Table: 9, Kind: wire.KeysExplicit, Count: 1, Width: 2, Keys: []uint64{5}, Vals: wire.F32Bytes([]float32{1, 2})}, wire.CodeUnknownTable},
		"wrong_width":    {wire.Data{Table: 1, Kind: wire.KeysExplicit, Count: 1, Width: 1, Keys: []uint64{5}, Vals: wire.F32Bytes([]float32{1})}, wire.CodeBadRequest},
		"unsorted":       {wire.Data{Table: 1, Kind: wire.KeysExplicit, Count: 2, Width: 2, Keys: []uint64{6, 5}, Vals: wire.F32Bytes(make([]float32, 4))}, wire.CodeBadRequest},
		"unknown_keyset": {wire.Data{Table: 1, Kind: wire.KeysCached, CacheID: 77, Count: 1, Width: 2, Vals: wire.F32Bytes([]float32{1, 2})}, wire.CodeUnknownKeySet},
		"range_count":    {wire.Data{Table: 1, Kind: wire.KeysRange, Count: 3, Width: 2, Lo: 0, Hi: 10, Vals: wire.F32Bytes(make([]float32, 6))}, wire.CodeNotOwner},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			h, p := call(t, addr, wire.TPush, 3, c.d)
			wantError(t, h, p, c.code)
		})
	}
}

// TestSurvivesGarbage sends corrupt and random frames; the server must drop
// those connections and go on serving others.
func TestSurvivesGarbage(t *testing.T) {
	s, addr := start(t)
	rng := rand.New(rand.NewPCG(9, 9))
	good := wire.Data{Table: 1, Kind: wire.KeysExplicit, Count: 1, Width: 2, Keys: []uint64{5}, Vals: wire.F32Bytes([]float32{1, 2})}
	var pre [wire.DataPrefixSize]byte
	var frame bytes.Buffer
	wire.NewFrame(wire.Header{Type: wire.TPush, Epoch: 3, ReqID: 1}, good.Parts(&pre)...).WriteTo(&frame)
	for i := range 50 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		var hello bytes.Buffer
		wire.NewFrame(wire.Header{Type: wire.THello}, wire.AppendHello(nil, wire.Hello{Worker: 0})).WriteTo(&hello)
		b := append(hello.Bytes(), frame.Bytes()...)
		switch i % 3 {
		case 0: // flip a random bit after the hello
			j := hello.Len() + rng.IntN(frame.Len())
			b[j] ^= 1 << rng.IntN(8)
		case 1: // random bytes
			b = make([]byte, 1+rng.IntN(200))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
		case 2: // torn frame
			b = b[:hello.Len()+rng.IntN(frame.Len())]
		}
		nc.Write(b)
		nc.Close()
	}
	h, p := call(t, addr, wire.TPush, 3, good)
	if h.Type != wire.TReply {
		wantError(t, h, p, 0)
	}
	h, p = call(t, addr, wire.TPull, 3, wire.Data{Table: 1, Kind: wire.KeysExplicit, Count: 1, Width: 2, Keys: []uint64{5}})
	_, vals, err := wire.ParseReply(p)
	if err != nil || h.Type != wire.TReply {
		t.Fatalf("pull after garbage: %v %v", h.Type, err)
	}
	if got := wire.BytesF32(vals); got[0] < 1 || got[1] < 2 {
		t.Fatalf("value after garbage %v", got)
	}
	if s.Stats().Errors == 0 {
		t.Error("no errors counted for 50 bad connections")
	}
}

func TestConfigureRejectsChangedTable(t *testing.T) {
	s, addr := start(t)
	spec := table.Spec{Name: "t", Width: 3}
	spec.Validate()
	err := s.Configure(&layout.Layout{Version: 2, Epoch: 3, Workers: 1, Servers: []ring.Server{{ID: "s0", Addr: addr}}, Tables: []layout.Table{{ID: 1, Spec: spec}}})
	if err == nil {
		t.Fatal("a table changed its width and the server accepted it")
	}
	// A layout without this server means it departed: it serves nothing.
	if err := s.Configure(&layout.Layout{Version: 2, Epoch: 4, Servers: []ring.Server{{ID: "other", Addr: addr}}, Tables: []layout.Table{{ID: 1, Spec: mustSpec(t)}}}); err != nil {
		t.Fatal(err)
	}
	h, p := call(t, addr, wire.TPush, 4, wire.Data{Table: 1, Kind: wire.KeysExplicit, Count: 1, Width: 2, Keys: []uint64{5}, Vals: wire.F32Bytes([]float32{1, 2})})
	wantError(t, h, p, wire.CodeNotOwner)
}

func mustSpec(t *testing.T) table.Spec {
	spec := table.Spec{Name: "t", Width: 2}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	return spec
}
