package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
)

// rawPair is the baseline for every wire figure: two goroutines, each with
// its own loopback socket, copying the same bytes with no protocol on top.
// The client sends a length-prefixed request of up to size bytes; the
// server reads it whole into its own buffer and answers with as many bytes
// as the request asked for, which the client reads whole.
type rawPair struct {
	ln         net.Listener
	client     net.Conn
	send, recv []byte
	served     chan error
	stop       func() bool
	closeOnce  sync.Once
	closeErr   error
}

func newRawPair(ctx context.Context, size int) (*rawPair, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: raw tcp: listen: %w", err)
	}
	accepted := make(chan net.Conn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			acceptErr <- err
			return
		}
		accepted <- c
	}()
	var d net.Dialer
	client, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("bench: raw tcp: dial: %w", err)
	}
	var server net.Conn
	select {
	case server = <-accepted:
	case err := <-acceptErr:
		client.Close()
		ln.Close()
		return nil, fmt.Errorf("bench: raw tcp: accept: %w", err)
	}
	client, server = tune(client), tune(server)
	p := &rawPair{ln: ln, client: client, send: make([]byte, size), recv: make([]byte, size), served: make(chan error, 1)}
	for i := range p.send {
		p.send[i] = byte(i * 7)
	}
	// A cancelled run must not leave a round blocked in a read.
	p.stop = context.AfterFunc(ctx, func() { client.Close() })
	go func() { p.served <- serveRaw(server, size) }()
	return p, nil
}

// tune gives the sockets the options transport.NewConn gives its own, and
// its way of reading and writing them (raw system calls), so that the
// ratio measures the protocol and not the socket settings.
func tune(c net.Conn) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetReadBuffer(4 << 20)
		tc.SetWriteBuffer(4 << 20)
	}
	return transport.RawTCP(c)
}

func serveRaw(c net.Conn, size int) error {
	defer c.Close()
	buf := make([]byte, size)
	var hdr [16]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("bench: raw tcp server: %w", err)
		}
		req, reply := binary.LittleEndian.Uint64(hdr[0:]), binary.LittleEndian.Uint64(hdr[8:])
		if req > uint64(size) || reply > uint64(size) {
			return fmt.Errorf("bench: raw tcp server: round of %d+%d bytes, buffer holds %d", req, reply, size)
		}
		if _, err := io.ReadFull(c, buf[:req]); err != nil {
			return fmt.Errorf("bench: raw tcp server: read %d bytes: %w", req, err)
		}
		var rh [8]byte
		binary.LittleEndian.PutUint64(rh[:], reply)
		out := net.Buffers{rh[:], buf[:reply]}
		if _, err := out.WriteTo(c); err != nil {
			return fmt.Errorf("bench: raw tcp server: write %d bytes: %w", reply, err)
		}
	}
}

// round sends req bytes and reads a reply of reply bytes.
func (p *rawPair) round(req, reply int) error {
	var hdr [16]byte
	binary.LittleEndian.PutUint64(hdr[0:], uint64(req))
	binary.LittleEndian.PutUint64(hdr[8:], uint64(reply))
	out := net.Buffers{hdr[:], p.send[:req]}
	if _, err := out.WriteTo(p.client); err != nil {
		return fmt.Errorf("bench: raw tcp: write %d bytes: %w", req, err)
	}
	var rh [8]byte
	if _, err := io.ReadFull(p.client, rh[:]); err != nil {
		return fmt.Errorf("bench: raw tcp: read reply header: %w", err)
	}
	if n := binary.LittleEndian.Uint64(rh[:]); n != uint64(reply) {
		return fmt.Errorf("bench: raw tcp: reply of %d bytes, asked for %d", n, reply)
	}
	if _, err := io.ReadFull(p.client, p.recv[:reply]); err != nil {
		return fmt.Errorf("bench: raw tcp: read %d bytes: %w", reply, err)
	}
	return nil
}

// Close stops the server goroutine and returns its error; it may be
// called again (a deferred Close after a checked one).
func (p *rawPair) Close() error {
	p.closeOnce.Do(func() {
		p.stop()
		p.client.Close()
		p.closeErr = <-p.served
		p.ln.Close()
	})
	return p.closeErr
}
