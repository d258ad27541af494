package peernet

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/ps"
)

// logBuffer is a slog destination the test reads.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func listen(t *testing.T, ctx context.Context, log *logBuffer) *Endpoint {
	t.Helper()
	o := Options{DialTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}
	if log != nil {
		o.Logger = slog.New(slog.NewTextHandler(log, nil))
	}
	e, err := Listen(ctx, "127.0.0.1:0", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// static resolves ranks from a fixed table.
func static(addrs map[int]string) func(int) string {
	var mu sync.Mutex
	return func(r int) string {
		mu.Lock()
		defer mu.Unlock()
		return addrs[r]
	}
}

func receive(t *testing.T, ctx context.Context, e *Endpoint) ps.PeerMessage {
	t.Helper()
	select {
	case m := <-e.Receive():
		return m
	case <-ctx.Done():
		t.Fatalf("no message: %v (stats %+v)", ctx.Err(), e.Stats())
		return ps.PeerMessage{}
	}
}

// TestExchange: two endpoints on 127.0.0.1 tell each other their progress
// and a cut, each message arriving from its sender's rank.
func TestExchange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := listen(t, ctx, nil), listen(t, ctx, nil)
	addrs := static(map[int]string{0: a.Addr(), 1: b.Addr()})
	a.Bind(0, addrs)
	b.Bind(1, addrs)
	p := ps.PeerProgress{Pass: 1, Partition: 3, Start: 10, Offset: 50, End: 900, Rate: 2500}
	a.Send(1, ps.PeerMessage{Progress: &p})
	if m := receive(t, ctx, b); m.From != 0 || m.Progress == nil || *m.Progress != p {
		t.Fatalf("b got %+v %+v", m, m.Progress)
	}
	cut := ps.PeerCut{Pass: 1, Partition: 3, From: 700}
	b.Send(0, ps.PeerMessage{Cut: &cut})
	if m := receive(t, ctx, a); m.From != 1 || m.Cut == nil || *m.Cut != cut {
		t.Fatalf("a got %+v %+v", m, m.Cut)
	}
	// A rank that moves (a worker restarted under its ID on a new port)
	// is sent to at its new address.
	b2 := listen(t, ctx, nil)
	b2.Bind(1, addrs)
	moved := static(map[int]string{0: a.Addr(), 1: b2.Addr()})
	a.Bind(0, moved)
	a.Send(1, ps.PeerMessage{Progress: &p})
	if m := receive(t, ctx, b2); m.From != 0 {
		t.Fatalf("after the move b2 got %+v", m)
	}
	// A rank with no address, and an endpoint not yet bound, drop.
	a.Send(7, ps.PeerMessage{Progress: &p})
	c := listen(t, ctx, nil)
	c.Send(0, ps.PeerMessage{Progress: &p})
	if a.Stats().Dropped != 1 || c.Stats().Dropped != 1 || b.Stats().Received != 1 || b2.Stats().Received != 1 {
		t.Fatalf("stats a %+v b %+v c %+v", a.Stats(), b.Stats(), c.Stats())
	}
	// A rank the layout lists as finished has no address.
	lay := &layout.Layout{PeerAddrs: map[int]string{0: "x:1", 1: "y:2"}, Finished: []int{1}}
	if r := FromLayout(func() *layout.Layout { return lay }); r(0) != "x:1" || r(1) != "" || r(2) != "" {
		t.Fatalf("FromLayout: %q %q %q", r(0), r(1), r(2))
	}
}

// TestSendToClosedPeer: a peer that is gone, or that accepts and never
// reads, never blocks Send, and the endpoint still closes: dials and
// writes have deadlines.
func TestSendToClosedPeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := listen(t, ctx, nil)
	gone := listen(t, ctx, nil)
	goneAddr := gone.Addr()
	gone.Close()
	// A listener that accepts and never reads: its buffers fill up.
	hung, err := transport.TCP.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	a.Bind(0, static(map[int]string{1: goneAddr, 2: hung.Addr().String()}))
	p := ps.PeerProgress{Pass: 0, Partition: 1, End: 100, Rate: 1}
	for range 200_000 { // about 18 MB to the hung peer: more than its socket buffers
		a.Send(1, ps.PeerMessage{Progress: &p})
		a.Send(2, ps.PeerMessage{Progress: &p})
	}
	if st := a.Stats(); st.Dropped == 0 {
		t.Fatalf("nothing dropped: %+v", st)
	}
	a.Close() // returns only once the writers gave up: a deadline, not a hang
	a.Send(1, ps.PeerMessage{Progress: &p})
	hung.Close()
	<-accepted
	for _, c := range held {
		c.Close()
	}
}

// TestGarbageRefused: frames that are not messages are refused with a
// warning that says why, their connection closed, and the endpoint goes
// on receiving from others; a message for another rank is discarded.
func TestGarbageRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var log logBuffer
	b := listen(t, ctx, &log)
	a := listen(t, ctx, nil)
	addrs := static(map[int]string{0: a.Addr(), 1: b.Addr()})
	b.Bind(1, addrs)
	a.Bind(0, addrs)
	good, _ := Append(nil, Frame{To: 1, M: ps.PeerMessage{From: 5, Progress: &ps.PeerProgress{Partition: 2, End: 9, Rate: 3}}})
	other, _ := Append(nil, Frame{To: 4, M: ps.PeerMessage{From: 5, Progress: &ps.PeerProgress{Partition: 2, End: 9, Rate: 3}}})
	corrupt := bytes.Clone(good)
	corrupt[lengthLen+20]++
	for name, garbage := range map[string][]byte{
		"oversized":   {0xff, 0xff, 0xff, 0x7f, 1, 2, 3},
		"bad crc":     corrupt,
		"not a frame": []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"short":       {3, 0, 0, 0, 'a', 'b', 'c'},
	} {
		c, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		// A good frame and one for another rank first: the connection is
		// read up to the garbage, then closed.
		c.Write(append(append(bytes.Clone(good), other...), garbage...))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("%s: the connection stays open: %d, %v", name, n, err)
		}
		c.Close()
		if m := receive(t, ctx, b); m.From != 5 {
			t.Fatalf("%s: got %+v", name, m)
		}
	}
	if st := b.Stats(); st.Refused != 4 || st.Discarded != 4 || st.Received != 4 {
		t.Fatalf("stats %+v", st)
	}
	for _, want := range []string{"peer message refused", "too large", "checksum", "at least"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("no %q in the log:\n%s", want, log.String())
		}
	}
	// Peers still get through.
	a.Send(1, ps.PeerMessage{Cut: &ps.PeerCut{Pass: 0, Partition: 1, From: 2}})
	if m := receive(t, ctx, b); m.From != 0 || m.Cut == nil {
		t.Fatalf("after the garbage: %+v", m)
	}
}

// TestSendWhileClosing: sends racing Close neither panic nor start a
// sender Close does not wait for (run it with -race).
func TestSendWhileClosing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := listen(t, ctx, nil), listen(t, ctx, nil)
	a.Bind(0, static(map[int]string{1: b.Addr(), 2: b.Addr(), 3: b.Addr()}))
	var wg sync.WaitGroup
	for to := 1; to <= 3; to++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps.PeerProgress{Partition: to, End: 10, Rate: 1}
			for range 2000 {
				a.Send(to, ps.PeerMessage{Progress: &p})
			}
		}()
	}
	a.Close()
	wg.Wait()
}

// TestEndpointMetrics: the endpoint's counts are a Prometheus counter by
// outcome that promlint finds nothing wrong with.
func TestEndpointMetrics(t *testing.T) {
	ep, err := Listen(context.Background(), "127.0.0.1:0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if n := testutil.CollectAndCount(ep.Collector(), "terrace_worker_peer_messages_total"); n != 5 {
		t.Fatalf("%d series, want one per outcome (5)", n)
	}
	problems, err := testutil.CollectAndLint(ep.Collector())
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
}
