package transport

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// echo serves: every frame after the hello is answered with a reply of the
// same payload and request id.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				c := NewConn(nc, 0)
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
					if h.Type == wire.THello {
						continue
					}
					c.Send(Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, ReqID: h.ReqID}, append([]byte(nil), p...))})
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestManyConcurrentCalls(t *testing.T) {
	addr := echo(t)
	c, err := Dial(context.Background(), addr, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 2000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		id := c.NextID()
		body := []byte{byte(i), byte(i >> 8)}
		c.Call(wire.NewFrame(wire.Header{Type: wire.TPull, ReqID: id}, body), id, &Call{
			OnReply: func(h wire.Header, r *wire.Reader) error {
				defer wg.Done()
				p, err := r.Payload(h)
				if err == nil && (h.ReqID != id || p[0] != byte(i) || p[1] != byte(i>>8)) {
					errs <- errors.New("reply matched to the wrong request")
				}
				return err
			},
			OnFail: func(err error) { errs <- err; wg.Done() },
		}, nil)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestConnLostFailsPendingCalls(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			time.Sleep(50 * time.Millisecond)
			nc.Close()
		}
	}()
	c, err := Dial(context.Background(), ln.Addr().String(), DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	failed := make(chan error, 1)
	id := c.NextID()
	c.Call(wire.NewFrame(wire.Header{Type: wire.TPull, ReqID: id}), id, &Call{
		OnReply: func(wire.Header, *wire.Reader) error { return nil },
		OnFail:  func(err error) { failed <- err },
	}, nil)
	select {
	case err := <-failed:
		if !errors.Is(err, ErrConnLost) {
			t.Fatalf("got %v, want ErrConnLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pending call not failed after the peer hung up")
	}
	// Later calls fail at once, through OnFail as well as the result: a
	// caller that checked the connection a moment before and ignores the
	// result must not wait forever (a push lost this way hung a worker).
	done := make(chan error, 1)
	id = c.NextID()
	err = c.Call(wire.NewFrame(wire.Header{Type: wire.TPull, ReqID: id}), id, &Call{OnFail: func(err error) { done <- err }}, nil)
	if err == nil {
		t.Fatal("call on a dead connection returned no error")
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrConnLost) {
			t.Fatalf("OnFail got %v, want ErrConnLost", err)
		}
	default:
		t.Fatal("call on a dead connection did not run OnFail")
	}
}

// TestWriteDeadline: a peer that never reads makes the writer give up
// instead of blocking its senders forever.
func TestWriteDeadline(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			defer nc.Close()
			time.Sleep(10 * time.Second)
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := NewConn(nc, 0)
	c.WriteTimeout = 200 * time.Millisecond
	defer c.Close()
	big := make([]byte, 8<<20)
	for range 8 {
		c.Send(Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TPush}, big)})
	}
	select {
	case <-c.Done():
		if c.Err() == nil {
			t.Fatal("writer stopped without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("writer still blocked on a peer that does not read")
	}
}
