package transport

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		done <- c
	}()
	ca, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cb := <-done
	if cb == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { ca.Close(); cb.Close() })
	return ca.(*net.TCPConn), cb.(*net.TCPConn)
}

// Both ends write and read at once, each from its own goroutine as a Conn
// does, in buffers of every size (empty ones too) over small socket
// buffers, so that writes are partial and reads short: every byte arrives
// in order. Under -race this also checks that the reader's and the
// writer's results are kept apart.
func TestRawSockBothWaysAtOnce(t *testing.T) {
	a, b := tcpPair(t)
	for _, c := range []*net.TCPConn{a, b} {
		c.SetReadBuffer(64 << 10)
		c.SetWriteBuffer(64 << 10)
	}
	const n = 6 << 20
	rng := rand.New(rand.NewPCG(5, 6))
	data := [2][]byte{make([]byte, n), make([]byte, n)}
	for _, d := range data {
		for i := range d {
			d[i] = byte(rng.Uint32())
		}
	}
	socks := [2]*rawSock{newRawSock(a), newRawSock(b)}
	errs := make(chan error, 4)
	for i, s := range socks {
		go func() { // writer: the data cut into buffers of random sizes
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			var bufs net.Buffers
			for off := 0; off < n; {
				m := min(n-off, rng.IntN(300<<10))
				bufs = append(bufs, data[i][off:off+m], nil)
				off += m
			}
			w, err := s.WriteBuffers(&bufs)
			if err == nil && (w != n || len(bufs) != 0) {
				err = errors.New("short write without an error")
			}
			errs <- err
		}()
		go func() { // reader: what the other end wrote
			got := make([]byte, n)
			_, err := io.ReadFull(s, got)
			if err == nil && !bytes.Equal(got, data[1-i]) {
				err = errors.New("the bytes read differ from those written")
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// The errors are those of a net.Conn: a deadline is os.ErrDeadlineExceeded,
// the peer's close io.EOF, our own close net.ErrClosed, and a write to a
// reset connection a *net.OpError naming writev.
func TestRawSockErrors(t *testing.T) {
	a, b := tcpPair(t)
	s := newRawSock(a)
	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := s.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	a.SetReadDeadline(time.Time{})
	b.Write([]byte("hi"))
	b.Close()
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "hi" {
		t.Fatalf("read to the peer's close: %q, %v; want \"hi\" and the end", got, err)
	}
	var err2 error
	for range 100 { // the peer is gone: a write is refused once the reset is back
		bufs := net.Buffers{make([]byte, 64<<10)}
		if _, err2 = s.WriteBuffers(&bufs); err2 != nil {
			break
		}
	}
	var op *net.OpError
	if !errors.As(err2, &op) || op.Op != "write" {
		t.Fatalf("write to a closed peer: %v, want a write *net.OpError", err2)
	}
	a.Close()
	if _, err := s.Read(make([]byte, 10)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after our close: %v, want net.ErrClosed", err)
	}
}

// RawTCP wraps plain TCP only, and its Write and Read carry the bytes.
func TestRawTCP(t *testing.T) {
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if RawTCP(p) != p {
		t.Error("RawTCP wrapped a connection that is not TCP")
	}
	a, b := tcpPair(t)
	ra, rb := RawTCP(a), RawTCP(b)
	if _, ok := ra.(*rawTCP); !ok {
		t.Fatalf("RawTCP(%T) = %T, want its raw wrapper", a, ra)
	}
	msg := bytes.Repeat([]byte("terrace "), 100_000)
	go func() {
		ra.Write(msg)
		ra.Close()
	}()
	got, err := io.ReadAll(rb)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, len(msg))
	}
}

// Several goroutines may write a RawTCP connection at once, as any
// net.Conn: every write arrives whole (run under -race).
func TestRawTCPConcurrentWrites(t *testing.T) {
	a, b := tcpPair(t)
	ra, rb := RawTCP(a), RawTCP(b)
	const writers, each = 4, 500
	done := make(chan error, writers)
	for w := range writers {
		go func() {
			msg := bytes.Repeat([]byte{byte('a' + w)}, 64)
			for range each {
				if _, err := ra.Write(msg); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	go func() {
		for range writers {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
		ra.Close()
	}()
	got, err := io.ReadAll(rb)
	if err != nil || len(got) != writers*each*64 {
		t.Fatalf("read %d bytes (%v), want %d", len(got), err, writers*each*64)
	}
	for i := 0; i < len(got); i += 64 { // whole 64-byte writes, never interleaved
		if c := bytes.Count(got[i:i+64], got[i:i+1]); c != 64 {
			t.Fatalf("write at byte %d interleaved with another", i)
		}
	}
}
