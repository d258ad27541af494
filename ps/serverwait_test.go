package ps_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/server"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// A running worker whose last server dies (docs/design/resilience.md, "A
// running worker whose servers stop answering"): the layout never
// changes, as the coordinator keeps the last server on the ring.

// oneServerLayout is a ready layout of one server, s0 at addr, tried
// again every 50 ms while it does not answer.
func oneServerLayout(addr string) *layout.Layout {
	spec := table.Spec{Name: "t", Width: 1}
	spec.Validate()
	return &layout.Layout{Version: 1, Epoch: 1, Ready: true, Workers: 1, Partitions: 1, FailureTimeoutMillis: 250,
		Servers: []ring.Server{{ID: "s0", Addr: addr}}, Tables: []layout.Table{{ID: 1, Spec: spec}}}
}

// serveAt runs server id (of l, or another) at addr until the returned kill, which
// closes its listener and connections and returns once it has stopped,
// as a SIGKILLed process's are.
func serveAt(t *testing.T, id, addr string, l *layout.Layout) (kill func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(server.Options{ID: id})
	if err := s.Configure(l); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(ctx, ln)
	}()
	kill = func() {
		cancel()
		<-done
	}
	t.Cleanup(kill)
	return kill
}

// connectAndKill connects a worker to a server that it then kills, and
// returns the worker's table after one acknowledged push.
func connectAndKill(t *testing.T, ctx context.Context, wait time.Duration) (*ps.Client, *ps.Table, string, *layout.Layout) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	l := oneServerLayout(addr)
	kill := serveAt(t, "s0", addr, l)
	c, err := ps.Connect(ctx, staticControl{l}, ps.Options{Rank: 0, ServerWait: wait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tb, err := c.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Push([]uint64{1}, []float32{1}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	kill()
	return c, tb, addr, l
}

// TestRunningClientWaitsForItsServer: the server comes back at its
// address under the same layout; the push sent while it was gone is
// acknowledged. The retry waited only for a newer layout, and failed
// after 10 s ("context deadline exceeded (after ... connection lost)").
func TestRunningClientWaitsForItsServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, tb, addr, l := connectAndKill(t, ctx, time.Minute)
	f := tb.Push([]uint64{1}, []float32{2})
	// The schedule of the scenario, not a wait for something: the
	// server is started again well after the push found it gone.
	back := make(chan struct{})
	time.AfterFunc(500*time.Millisecond, func() {
		defer close(back)
		serveAt(t, "s0", addr, l)
	})
	err := f.Wait(ctx)
	<-back
	if err != nil {
		t.Fatalf("a push while the only server was gone, which came back at its address: %v", err)
	}
	got := make([]float32, 1)
	if err := tb.Pull([]uint64{1}, got).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got[0] != 2 { // the new process started empty
		t.Fatalf("key 1 = %v after the push to the new process, want 2", got[0])
	}
}

// TestRunningClientGivesUpNamingServers: no server comes back within
// ServerWait; the operation fails with ErrNoServer naming the server.
func TestRunningClientGivesUpNamingServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, tb, addr, _ := connectAndKill(t, ctx, 300*time.Millisecond)
	err := tb.Push([]uint64{1}, []float32{2}).Wait(ctx)
	if !errors.Is(err, ps.ErrNoServer) || !strings.Contains(err.Error(), "s0") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("a push with the only server gone for good: %v; want ErrNoServer naming s0 at %s", err, addr)
	}
}

// TestDrainStopsWaitingForServers: a worker told to drain while no
// server of its layout answers stops waiting, with an error that says
// both; it waited out its patience and failed as any error does.
func TestDrainStopsWaitingForServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, tb, _, _ := connectAndKill(t, ctx, 10*time.Minute)
	f := tb.Push([]uint64{1}, []float32{2})
	c.Drain()
	err := f.Wait(ctx)
	if !errors.Is(err, ps.ErrDrained) || !errors.Is(err, ps.ErrNoServer) {
		t.Fatalf("a push of a draining worker with the only server gone: %v; want ErrDrained and ErrNoServer", err)
	}
}

// TestRunningClientWaitsPastAnotherServer: another server (started again
// without its ID) answers at the dead server's address and refuses every
// key as not its own; the client takes the address as unreachable and
// waits, and the push goes through once s0 answers there again. Its
// retries ran out within a second ("giving up after 21 attempts: ...
// key 1 belongs to server s0").
func TestRunningClientWaitsPastAnotherServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, tb, addr, l := connectAndKill(t, ctx, time.Minute)
	other := serveAt(t, "s9", addr, l)
	f := tb.Push([]uint64{1}, []float32{2})
	back := make(chan struct{})
	time.AfterFunc(time.Second, func() {
		defer close(back)
		other()
		serveAt(t, "s0", addr, l)
	})
	err := f.Wait(ctx)
	<-back
	if err != nil {
		t.Fatalf("a push while another server answered at s0's address, then s0 again: %v", err)
	}
	// And with another server there for good: ErrNoServer, saying so.
	_, tb2, addr2, l2 := connectAndKill(t, ctx, 500*time.Millisecond)
	serveAt(t, "s9", addr2, l2)
	err = tb2.Push([]uint64{1}, []float32{2}).Wait(ctx)
	if !errors.Is(err, ps.ErrNoServer) || !strings.Contains(err.Error(), "s9 answers at "+addr2) {
		t.Fatalf("a push with another server at s0's address for good: %v; want ErrNoServer saying s9 answers at %s", err, addr2)
	}
}
