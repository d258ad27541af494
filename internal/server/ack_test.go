package server

import (
	"net"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// latePeer is a replication peer that confirms only when told: frames
// receives the request ID of every replication message it reads, and
// confirm answers one.
type latePeer struct {
	addr   string
	frames chan uint64
	conns  chan *transport.Conn
}

func startLatePeer(t *testing.T) *latePeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &latePeer{addr: ln.Addr().String(), frames: make(chan uint64, 64), conns: make(chan *transport.Conn, 8)}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			tc := transport.NewConn(nc, 0)
			t.Cleanup(func() { tc.Close() })
			p.conns <- tc
			go func() {
				for {
					h, err := tc.Reader.Next()
					if err == nil {
						_, err = tc.Reader.Payload(h)
					}
					if err != nil {
						return
					}
					if h.Type == wire.TReplicate {
						p.frames <- h.ReqID
					}
				}
			}()
		}
	}()
	return p
}

// next returns the request ID of the next replication message the peer
// reads.
func (p *latePeer) next(t *testing.T) uint64 {
	t.Helper()
	select {
	case id := <-p.frames:
		return id
	case <-time.After(time.Minute):
		t.Fatal("no replication message reached the peer")
	}
	return 0
}

func (p *latePeer) confirm(tc *transport.Conn, id uint64) {
	var pre [wire.ReplyPrefixSize]byte
	wire.PutReply(&pre, 0)
	tc.Send(transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: 3, ReqID: id}, pre[:])})
}

// headWith serves server "a" of a layout of "a" and peer (k = 2) under
// policy, and returns it, a client connection to it and a key it heads.
func headWith(t *testing.T, peer string, policy AckPolicy, durable chan uint64) (*Server, *transport.Client, uint64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{ID: "a", AckPolicy: func(string) AckPolicy { return policy }})
	s.onDurable = func(_ string, d uint64) { durable <- d }
	l := &layout.Layout{Version: 1, Epoch: 3, Workers: 1, Replication: 2, SyncIntervalMillis: 1,
		Servers: []ring.Server{{ID: "a", Addr: ln.Addr().String()}, {ID: "b", Addr: peer}},
		Tables:  []layout.Table{{ID: 1, Spec: mustSpec(t)}}}
	serve(t, s, ln, l)
	c, key := clientOf(t, s, ln.Addr().String())
	return s, c, key
}

// clientOf dials s, server "a" at addr, as client 1, and returns the
// connection and the first key of a slot s heads.
func clientOf(t *testing.T, s *Server, addr string) (*transport.Client, uint64) {
	t.Helper()
	key := uint64(0)
	for s.ring.Servers[s.ring.SlotOwner(key/64)].ID != "a" {
		key += 64
	}
	c, err := transport.Dial(t.Context(), addr, transport.DialOptions{Hello: wire.Hello{Worker: wire.NoWorker, Node: "test", Client: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, key
}

// sendPush sends a push of one key and returns a channel that is closed when
// it is acknowledged.
func sendPush(t *testing.T, c *transport.Client, key uint64, seq uint64) chan struct{} {
	acked := make(chan struct{})
	d := wire.Data{Table: 1, Kind: wire.KeysExplicit, Count: 1, Width: 2, Worker: wire.NoWorker, Seq: seq, Keys: []uint64{key}, Vals: wire.F32Bytes([]float32{1, 1})}
	var pre [wire.DataPrefixSize]byte
	id := c.NextID()
	c.Call(wire.NewFrame(wire.Header{Type: wire.TPush, Epoch: 3, ReqID: id}, d.Parts(&pre)...), id, &transport.Call{
		OnReply: func(h wire.Header, r *wire.Reader) error {
			_, err := r.Payload(h)
			if h.Type != wire.TReply {
				t.Errorf("push refused: %v", h.Type)
			}
			close(acked)
			return err
		},
		OnFail: func(err error) { t.Errorf("push failed: %v", err) },
	}, nil)
	return acked
}

func wait(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s: not after a minute", what)
	}
}

// TestBulkPeerConfirmsLate: under AckBulk a push is acknowledged without
// waiting for the round that carries it, the stream sends the next round
// before the peer confirmed the last, and the durability watermark moves
// only as the peer confirms, in order. The gate: a push queued while a
// round is unconfirmed is acknowledged once that round is confirmed, so
// that the acknowledged pushes the peer lacks all belong to one round.
func TestBulkPeerConfirmsLate(t *testing.T) {
	peer := startLatePeer(t)
	durable := make(chan uint64, 8)
	s, c, key := headWith(t, peer.addr, AckBulk, durable)
	wait(t, sendPush(t, c, key, 1), "first push acknowledged before the peer confirmed anything")
	first := peer.next(t)
	acked := sendPush(t, c, key+1, 2)
	second := peer.next(t) // a second round in flight before the first is confirmed
	if d, q, ok := s.Replication("b"); !ok || d != 0 || q != 2 {
		t.Fatalf("before any confirmation: durable %d of %d (%v), want 0 of 2", d, q, ok)
	}
	select {
	case <-acked:
		t.Fatal("a push queued while round 1 was unconfirmed was acknowledged before it (the gate)")
	default:
	}
	tc := <-peer.conns
	peer.confirm(tc, first)
	if d := <-durable; d != 1 {
		t.Fatalf("the first round confirmed: durable %d, want 1", d)
	}
	wait(t, acked, "second push acknowledged once the round before it is durable")
	peer.confirm(tc, second)
	if d := <-durable; d != 2 {
		t.Fatalf("both rounds confirmed: durable %d, want 2", d)
	}
}

// TestChainPushWaitsForThePeer: under AckChain a push is acknowledged only
// once the peer confirmed the round that carries it.
func TestChainPushWaitsForThePeer(t *testing.T) {
	peer := startLatePeer(t)
	durable := make(chan uint64, 8)
	_, c, key := headWith(t, peer.addr, AckChain, durable)
	acked := sendPush(t, c, key, 1)
	id := peer.next(t)
	select {
	case <-acked:
		t.Fatal("a push to a chain was acknowledged before the peer confirmed it")
	default:
	}
	peer.confirm(<-peer.conns, id)
	wait(t, acked, "push acknowledged once the peer confirmed")
	if d := <-durable; d != 1 {
		t.Fatalf("durable %d after the confirmation, want 1", d)
	}
}
