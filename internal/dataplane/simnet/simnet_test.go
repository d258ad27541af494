package simnet_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/simnet"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

var _ transport.Network = (*simnet.Host)(nil)

const delay = 3 * time.Millisecond

func newNet() *simnet.Net {
	return simnet.New(simnet.Config{MinDelay: delay, MaxDelay: delay, Buffer: 1024})
}

// pair returns both ends of a connection from host a to a listener on b.
func pair(t *testing.T, n *simnet.Net, a, b string) (client, server net.Conn) {
	t.Helper()
	ln, err := n.Host(b).Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := n.Host(a).Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return c, <-accepted
}

func TestDeliveryAfterDelayInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newNet()
		start := time.Now()
		c, s := pair(t, n, "a", "b")
		if d := time.Since(start); d != 2*delay {
			t.Fatalf("dial took %v, want one round trip (%v)", d, 2*delay)
		}
		sent := time.Now()
		c.Write([]byte("hello"))
		// A spike delays later bytes, but never past earlier ones.
		n.Delay("a", "b", 50*time.Millisecond)
		c.Write([]byte(" slow"))
		n.Delay("a", "b", 0)
		c.Write([]byte(" fast"))
		buf := make([]byte, 64)
		k, err := s.Read(buf)
		if err != nil || string(buf[:k]) != "hello" || time.Since(sent) != delay {
			t.Fatalf("read %q, %v after %v; want \"hello\" after %v", buf[:k], err, time.Since(sent), delay)
		}
		got, err := io.ReadAll(io.LimitReader(s, 10))
		if err != nil || string(got) != " slow fast" || time.Since(sent) != delay+50*time.Millisecond {
			t.Fatalf("read %q, %v after %v", got, err, time.Since(sent))
		}
		// Close: the peer reads what was sent, then EOF; its writes fail.
		c.Write([]byte("bye"))
		c.Close()
		got, err = io.ReadAll(s)
		if err != nil || string(got) != "bye" {
			t.Fatalf("after close: read %q, %v", got, err)
		}
		if _, err := s.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("write to a closed peer: %v", err)
		}
		if _, err := c.Read(buf); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed end: %v", err)
		}
	})
}

// TestBackPressureAndDeadlines: a writer waits while the buffer is full, a
// write deadline ends the wait, and a read deadline set from another
// goroutine wakes a blocked reader (as net/http does).
func TestBackPressureAndDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newNet()
		c, s := pair(t, n, "a", "b")
		c.SetWriteDeadline(time.Now().Add(time.Second))
		start := time.Now()
		k, err := c.Write(make([]byte, 3000))
		if k != 1024 || !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("write to a peer that does not read: %d bytes, %v, after %v", k, err, time.Since(start))
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%v is not a net.Error timeout", err)
		}
		// The reader drains; a writer blocked on the full buffer goes on.
		c.SetWriteDeadline(time.Time{})
		done := make(chan error)
		go func() {
			_, err := c.Write(make([]byte, 2000))
			done <- err
		}()
		if _, err := io.ReadFull(s, make([]byte, 3024)); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// A deadline in the past wakes a reader blocked on nothing to read.
		read := make(chan error)
		go func() {
			_, err := s.Read(make([]byte, 1))
			read <- err
		}()
		time.Sleep(time.Hour)
		s.SetReadDeadline(time.Unix(1, 0))
		if err := <-read; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after a past deadline: %v", err)
		}
	})
}

func TestCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newNet()
		c, s := pair(t, n, "a", "b")
		c.Write([]byte("lost in flight"))
		ln, err := n.Host("b").Listen(":7000")
		if err != nil {
			t.Fatal(err)
		}
		accepting := make(chan error)
		go func() {
			_, err := ln.Accept()
			accepting <- err
		}()
		synctest.Wait()
		n.Crash("b")
		if _, err := s.Read(make([]byte, 64)); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("crashed host's read: %v", err)
		}
		if _, err := c.Read(make([]byte, 64)); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("peer's read: %v", err)
		}
		if err := <-accepting; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("accept on a crashed host: %v", err)
		}
		if _, err := n.Host("a").Dial(context.Background(), "b:7000"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial to a crashed host: %v", err)
		}
		if _, err := n.Host("b").Dial(context.Background(), "a:1"); err == nil || !strings.Contains(err.Error(), "down") {
			t.Fatalf("dial from a crashed host: %v", err)
		}
	})
}

// TestPartition: bytes are held and dials wait while a link is cut, and
// flow again once it heals; other links are not affected.
func TestPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newNet()
		c, s := pair(t, n, "a", "b")
		n.Partition("b", "a")
		c.Write([]byte("held"))
		got := make(chan string)
		go func() {
			b := make([]byte, 16)
			k, _ := s.Read(b)
			got <- string(b[:k])
		}()
		ln, _ := n.Host("b").Listen(":9")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		_, err := n.Host("a").Dial(ctx, "b:9")
		cancel()
		if !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("dial across a partition: %v after %v", err, time.Since(start))
		}
		if _, err := n.Host("c").Dial(context.Background(), "b:9"); err != nil {
			t.Fatalf("dial on another link: %v", err)
		}
		ln.Accept()
		time.Sleep(time.Minute)
		select {
		case g := <-got:
			t.Fatalf("read %q across a partition", g)
		default:
		}
		healed := time.Now()
		n.Heal("a", "b")
		if g := <-got; g != "held" || time.Since(healed) != 0 {
			t.Fatalf("after heal: read %q after %v", g, time.Since(healed))
		}
	})
}

func TestDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newNet()
		c, _ := pair(t, n, "a", "b")
		a, b, ok := n.Drop(rand.New(rand.NewPCG(1, 2)))
		if !ok || a != "a" || b != "b" {
			t.Fatalf("Drop: %q %q %v", a, b, ok)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("write on a dropped connection: %v", err)
		}
		if _, _, ok := n.Drop(rand.New(rand.NewPCG(1, 2))); ok {
			t.Fatal("dropped a connection that was already reset")
		}
	})
}

// TestTransportAndHTTP runs the data plane's framed connections and
// net/http over the network, as the simulation does.
func TestTransportAndHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newNet()
		defer n.Close()
		ln, _ := n.Host("srv").Listen(":80")
		hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok "+r.URL.Path)
		})}
		go hs.Serve(ln)
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return n.Host("cli").Dial(ctx, addr)
		}}}
		for range 3 {
			resp, err := hc.Get("http://srv:80/x")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "ok /x" {
				t.Fatalf("got %q", b)
			}
		}
		hs.Close()
		hc.CloseIdleConnections()

		ln, _ = n.Host("srv").Listen(":81")
		go func() {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			c := transport.NewConn(nc, 0)
			defer c.Close()
			for {
				h, err := c.Reader.Next()
				if err != nil {
					return
				}
				p, err := c.Reader.Payload(h)
				if err != nil {
					return
				}
				if h.Type != wire.THello {
					c.Send(transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, ReqID: h.ReqID}, append([]byte(nil), p...))})
				}
			}
		}()
		cl, err := transport.Dial(context.Background(), "srv:81", transport.DialOptions{Network: n.Host("cli")})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		got := make(chan string, 1)
		id := cl.NextID()
		cl.Call(wire.NewFrame(wire.Header{Type: wire.TPull, ReqID: id}, []byte("ping")), id, &transport.Call{
			OnReply: func(h wire.Header, r *wire.Reader) error {
				p, err := r.Payload(h)
				got <- string(p)
				return err
			},
			OnFail: func(err error) { got <- err.Error() },
		}, nil)
		if g := <-got; g != "ping" {
			t.Fatalf("echo: %q", g)
		}
		// A crash fails the outstanding call.
		failed := make(chan error, 1)
		id = cl.NextID()
		cl.Call(wire.NewFrame(wire.Header{Type: wire.TPull, ReqID: id}), id, &transport.Call{
			OnReply: func(wire.Header, *wire.Reader) error { return nil },
			OnFail:  func(err error) { failed <- err },
		}, nil)
		n.Crash("srv")
		if err := <-failed; !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, transport.ErrConnLost) {
			t.Fatalf("call to a crashed host: %v", err)
		}
	})
}
