package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
)

// headOf configures server "a" of a layout of "a" and "b" (k = 2, "b" at
// addr) and returns it and a key that "a" heads.
func headOf(t *testing.T, addr string) (*Server, uint64) {
	t.Helper()
	s := New(Options{ID: "a"})
	l := &layout.Layout{Version: 1, Epoch: 3, Workers: 1, Replication: 2,
		Servers: []ring.Server{{ID: "a", Addr: "127.0.0.1:1"}, {ID: "b", Addr: addr}},
		Tables:  []layout.Table{{ID: 1, Spec: mustSpec(t)}}}
	if err := s.Configure(l); err != nil {
		t.Fatal(err)
	}
	sl := uint64(0)
	for s.ring.Servers[s.ring.SlotOwner(sl)].ID != "a" {
		sl++
	}
	return s, keyspace.SlotStart(sl)
}

// TestReplicationToAMutePeerGivesUp: a peer that takes replication frames
// and never confirms them does not hold the replicator (and so every push
// of its slots) for ever: the stream gives up on the connection after
// replicateQuiet, reconnects and sends again.
func TestReplicationToAMutePeerGivesUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			go io.Copy(io.Discard, c) // reads everything, answers nothing
		}
	}()
	defer func(d time.Duration) { replicateQuiet = d }(replicateQuiet)
	replicateQuiet = 100 * time.Millisecond
	s, key := headOf(t, ln.Addr().String())
	r := newReplicator(s, s.ring.Servers[s.ring.Index("b")], 0, AckChain)
	acked := make(chan error, 1)
	r.add(entry{items: []item{{t: s.tables[1], keys: keyspace.KeyList([]uint64{key})}}}, func(err error) { acked <- err })
	defer runReplicator(t.Context(), r)()
	for i := range 2 {
		select {
		case <-accepted:
		case <-time.After(time.Minute):
			t.Fatalf("connection %d to a mute peer never came", i+1)
		}
	}
	select {
	case err := <-acked:
		t.Fatalf("a push to a peer that confirmed nothing was acknowledged (%v)", err)
	default:
	}
}

// TestRoundReadsStateWhilePushesGoOn: a replicator reading a round's state
// does not hold pushes back, and a push applied meanwhile (whose effect the
// state read may carry) joins the round with its pair and its key read
// again, so that the peer never holds an effect without its pair.
func TestRoundReadsStateWhilePushesGoOn(t *testing.T) {
	s, key := headOf(t, "127.0.0.1:1")
	tb := s.tables[1]
	pushOne := func(k uint64, seq uint64) {
		all := keyspace.KeyList([]uint64{k})
		s.applyPush(tb, all, []float32{1, 1}, 7, seq)
		if after := s.replicate(tb, all, wire.Pair{Client: 7, Seq: seq, Table: 1}, func(error) {}); after != nil {
			defer after()
		}
		s.applyMu.RUnlock()
	}
	s.applyMu.RLock()
	pushOne(key, 1)
	r := s.repl["b"]
	s.onRoundRead = func() {
		s.onRoundRead = nil
		if !s.applyMu.TryRLock() {
			t.Fatal("a push waits while a replicator reads a round's state")
		}
		pushOne(key+1, 2)
	}
	p, msgs := r.nextRound()
	if len(p.send) != 2 {
		t.Fatalf("round of %d batches, want the first push's and the one applied while it was read", len(p.send))
	}
	var pairs []uint64
	read := map[uint64]float32{}
	for _, m := range msgs {
		for _, pr := range m.Pairs {
			pairs = append(pairs, pr.Seq)
		}
		for _, st := range m.States {
			for i, k := range st.Keys {
				read[k] = st.Floats[i*int(st.Stride)]
			}
		}
	}
	if len(pairs) != 2 || read[key+1] == 0 {
		t.Fatalf("round carries pairs %v and state %v; want both pushes' pairs and the second push's effect", pairs, read)
	}
}

// TestNoCopiesBeforeTheClusterForms: a server that holds state before its
// cluster has formed (a resume restores the checkpoint's slots under the
// first layout that asks) copies nothing to a server that joins while it
// forms: that server restores its own slots. The copies it began were
// sent under each later layout of the forming cluster, which could make
// another server their slots' head; the peer refused them for good, and
// the job hung.
func TestNoCopiesBeforeTheClusterForms(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c) // confirms no copy
		}
	}()
	rebuilt := make(chan uint64, 4)
	s := New(Options{ID: "a", OnRebuilt: func(v uint64) { rebuilt <- v }})
	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tables := []layout.Table{{ID: 1, Spec: mustSpec(t)}}
	a := ring.Server{ID: "a", Addr: own.Addr().String()}
	serve(t, s, own, &layout.Layout{Version: 1, Epoch: 3, Workers: 1, Replication: 2, Servers: []ring.Server{a}, Tables: tables})
	keys := make([]uint64, 64)
	for i := range keys {
		keys[i] = keyspace.SlotStart(uint64(i))
	}
	s.tables[1].store.Push(keys, make([]float32, len(keys)*s.tables[1].spec.Width))
	if err := s.Configure(&layout.Layout{Version: 2, Epoch: 5, PrevEpoch: 3, Workers: 1, Replication: 2,
		Servers: []ring.Server{a, {ID: "b", Addr: ln.Addr().String()}}, Tables: tables}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for {
		select {
		case v := <-rebuilt:
			if v == 2 {
				return
			}
		case <-ctx.Done():
			t.Fatal("the rebuild of a layout of a cluster still forming waits for copies to a joiner")
		}
	}
}

// TestReplicationWaitsForANewTable: a head that installed the layout with
// a new table before its peer replicates to it at once; the peer waits
// for that layout, as a data request does, instead of refusing the
// round (the head warned "replication failed; retrying" for a table the
// peer was about to learn).
func TestReplicationWaitsForANewTable(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	a := New(Options{ID: "a", Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))})
	b := New(Options{ID: "b"})
	waiting := make(chan struct{})
	var once sync.Once
	b.onCatchUp = func() { once.Do(func() { close(waiting) }) }
	la, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	servers := []ring.Server{{ID: "a", Addr: la.Addr().String()}, {ID: "b", Addr: lb.Addr().String()}}
	before := &layout.Layout{Version: 1, Epoch: 3, Workers: 1, Replication: 2, Servers: servers}
	after := &layout.Layout{Version: 2, Epoch: 3, Workers: 1, Replication: 2, Servers: servers, Tables: []layout.Table{{ID: 1, Spec: mustSpec(t)}}}
	serve(t, b, lb, before)
	serve(t, a, la, after)
	sl := uint64(0)
	for a.ring.Servers[a.ring.SlotOwner(sl)].ID != "a" {
		sl++
	}
	r := newReplicator(a, servers[1], 0, AckChain)
	acked := make(chan error, 1)
	r.add(entry{items: []item{{t: a.tables[1], keys: keyspace.KeyList([]uint64{keyspace.SlotStart(sl)})}}}, func(err error) { acked <- err })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	defer runReplicator(ctx, r)()
	select {
	case <-waiting:
	case <-ctx.Done():
		t.Fatal("the peer did not wait for the layout with the table")
	}
	if err := b.Configure(after); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-acked:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the push was never replicated")
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "replication failed") {
		t.Errorf("the head warned:\n%s", logs.String())
	}
}

// runReplicator runs r until ctx ends or the returned stop is called,
// which makes r leave and waits for it.
func runReplicator(ctx context.Context, r *replicator) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		r.run(ctx)
	}()
	return func() {
		r.leave()
		cancel()
		<-stopped
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
