package server

import (
	"net"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// fakePeer answers every frame it reads: with an error (code) if code is
// not 0, else as accepted; it passes on the pairs of ledger frames.
type fakePeer struct {
	addr  string
	pairs chan wire.Pair
}

func startFakePeer(t *testing.T, code wire.Code) *fakePeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &fakePeer{addr: ln.Addr().String(), pairs: make(chan wire.Pair, 64)}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			tc := transport.NewConn(nc, 0)
			t.Cleanup(func() { tc.Close() })
			go func() {
				for {
					h, err := tc.Reader.Next()
					if err != nil {
						return
					}
					pl, err := tc.Reader.Payload(h)
					if err != nil {
						return
					}
					if h.Type == wire.TLedger {
						m, err := wire.ParseReplicate(pl)
						if err != nil {
							t.Errorf("ledger frame: %v", err)
							return
						}
						for _, pr := range m.Pairs {
							p.pairs <- pr
						}
					}
					if code != 0 {
						tc.Send(transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TError, Epoch: h.Epoch, ReqID: h.ReqID}, wire.AppendError(nil, code, "refused"))})
						continue
					}
					var pre [wire.ReplyPrefixSize]byte
					wire.PutReply(&pre, 0)
					tc.Send(transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: h.Epoch, ReqID: h.ReqID}, pre[:])})
				}
			}()
		}
	}()
	return p
}

func (p *fakePeer) nextPair(t *testing.T) wire.Pair {
	t.Helper()
	select {
	case pr := <-p.pairs:
		return pr
	case <-time.After(time.Minute):
		t.Fatal("no ledger pair reached the BackupPS")
	}
	return wire.Pair{}
}

// TestFailedBackPushLeavesTheLedger: an ActivePS whose push reached its
// BackupPS's ledger, and which then stopped heading the push's slot before
// its chain member held it, fails the push back (errMoved), and its client
// re-sends it as parts under new sequence numbers: the push itself is
// never acknowledged. Before the client hears the failure, the ActivePS
// retracts the pair from the ledger; else the entry stayed until a copy
// of its slot reached the BackupPS, and a fallback meanwhile counted the
// push lost although its parts were applied (docs/design/tiers.md,
// "What the ledger counts exactly").
func TestFailedBackPushLeavesTheLedger(t *testing.T) {
	member := startFakePeer(t, wire.CodeStaleEpoch) // a chain member that refuses everything
	backup := startFakePeer(t, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{ID: "a"})
	l := &layout.Layout{Version: 1, Epoch: 3, Workers: 1, Replication: 2, SyncIntervalMillis: 1, Stage: tier.Stage2,
		Servers: []ring.Server{{ID: "a", Addr: ln.Addr().String()}, {ID: "b", Addr: member.addr}},
		Backup:  []ring.Server{{ID: "c", Addr: backup.addr}},
		Tables:  []layout.Table{{ID: 1, Spec: mustSpec(t)}}}
	serve(t, s, ln, l)
	c, key := clientOf(t, s, ln.Addr().String())

	replied := make(chan wire.Header, 1)
	d := wire.Data{Table: 1, Kind: wire.KeysExplicit, Count: 1, Width: 2, Worker: wire.NoWorker, Seq: 7, Keys: []uint64{key}, Vals: wire.F32Bytes([]float32{1, 1})}
	var pre [wire.DataPrefixSize]byte
	id := c.NextID()
	c.Call(wire.NewFrame(wire.Header{Type: wire.TPush, Epoch: 3, ReqID: id}, d.Parts(&pre)...), id, &transport.Call{
		OnReply: func(h wire.Header, r *wire.Reader) error {
			_, err := r.Payload(h)
			replied <- h
			return err
		},
		OnFail: func(err error) { t.Errorf("push failed: %v", err) },
	}, nil)
	if pr := backup.nextPair(t); pr.Client != 1 || pr.Seq != 7 || len(pr.Slots) == 0 {
		t.Fatalf("ledger pair %+v, want (1,7) with its slots", pr)
	}

	// a stops heading the slot: b heads every slot now.
	l2 := *l
	l2.Version, l2.Epoch, l2.PrevEpoch = 2, 4, 3
	l2.Servers = []ring.Server{{ID: "b", Addr: member.addr}}
	l2.Standby = []ring.Server{{ID: "a", Addr: ln.Addr().String()}}
	if err := s.Configure(&l2); err != nil {
		t.Fatal(err)
	}
	var h wire.Header
	select {
	case h = <-replied:
	case <-time.After(time.Minute):
		t.Fatal("the push was neither acknowledged nor failed back")
	}
	if h.Type != wire.TError {
		t.Fatalf("the push was answered %v, want an error (its slot moved before its chain held it)", h.Type)
	}
	for {
		select {
		case pr := <-backup.pairs:
			if pr.Client == 1 && pr.Seq == 7 && len(pr.Slots) == 0 {
				return // retracted before the client heard of the failure
			}
			continue
		default:
		}
		t.Fatal("the push was failed back, but its pair was not retracted from the BackupPS's ledger first")
	}
}
