package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"io"
	"net"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// The ceilings a dense push+pull is judged against, measured in the same
// rounds: raw_tcp (rawPair) moves the vector one way and then back, which
// the parameter-server path beats by overlapping the two directions, so
// it is no ceiling. duplexPair has the path's shape with nothing on top;
// streamPair is iperf3's (one way, 1 MiB writes); sumVectors and
// crcVector are the memory passes a push cannot avoid.

// duplexPair echoes frames of the PS path's size over conns loopback
// connections with both directions in flight: a client writer sends every
// frame at once while a client reader takes the replies, and each server
// connection has a reader handing frames to a writer, as server.serveConn
// hands them to its handler and transport.Conn's writer.
type duplexPair struct {
	conns     []duplexConn
	frame     int
	closeOnce sync.Once
	served    sync.WaitGroup
}

type duplexConn struct {
	client     net.Conn
	server     net.Conn
	send, recv []byte // the client's frame and its reply buffer
}

// duplexHeader is the length prefix of a duplex frame; the rest of the
// PS header (and its CRC) is left out, as it costs next to nothing.
const duplexHeader = wire.HeaderSize

func newDuplexPair(ctx context.Context, conns, frame int) (*duplexPair, error) {
	p := &duplexPair{frame: frame}
	for range conns {
		client, server, err := loopbackPair(ctx)
		if err != nil {
			p.Close()
			return nil, err
		}
		dc := duplexConn{client: client, server: server, send: make([]byte, duplexHeader+frame), recv: make([]byte, duplexHeader+frame)}
		binary.LittleEndian.PutUint64(dc.send, uint64(frame))
		for i := duplexHeader; i < len(dc.send); i++ {
			dc.send[i] = byte(i * 7)
		}
		p.conns = append(p.conns, dc)
		p.served.Add(1)
		go func() {
			defer p.served.Done()
			serveDuplex(server, frame)
		}()
	}
	context.AfterFunc(ctx, func() { p.Close() })
	return p, nil
}

// loopbackPair returns both ends of one tuned loopback TCP connection.
func loopbackPair(ctx context.Context) (client, server net.Conn, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: listen: %w", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	var d net.Dialer
	client, err = d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, fmt.Errorf("bench: dial: %w", err)
	}
	server, ok := <-accepted
	if !ok {
		client.Close()
		return nil, nil, errors.New("bench: accept failed")
	}
	return tune(client), tune(server), nil
}

// serveDuplex reads frames and writes a reply of the same size for each
// from a second goroutine, so that reading and writing overlap.
func serveDuplex(c net.Conn, frame int) {
	defer c.Close()
	replies := make(chan struct{}, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		out := make([]byte, duplexHeader+frame)
		binary.LittleEndian.PutUint64(out, uint64(frame))
		for range replies {
			if _, err := c.Write(out); err != nil {
				c.Close()
				for range replies {
				}
				return
			}
		}
	}()
	in := make([]byte, duplexHeader+frame)
	for {
		if _, err := io.ReadFull(c, in[:duplexHeader]); err != nil {
			break
		}
		n := binary.LittleEndian.Uint64(in)
		if n != uint64(frame) {
			break
		}
		if _, err := io.ReadFull(c, in[duplexHeader:]); err != nil {
			break
		}
		replies <- struct{}{}
	}
	close(replies)
	<-done
}

// round moves bytes each way, split evenly over the connections in
// frames: all of a connection's frames are written by one goroutine while
// another reads the replies.
func (p *duplexPair) round(bytes int) error {
	per := bytes / len(p.conns) / p.frame
	if per < 1 {
		per = 1
	}
	errs := make(chan error, 2*len(p.conns))
	for i := range p.conns {
		c := &p.conns[i]
		go func() {
			for range per {
				if _, err := c.client.Write(c.send); err != nil {
					errs <- fmt.Errorf("bench: duplex write: %w", err)
					return
				}
			}
			errs <- nil
		}()
		go func() {
			for range per {
				if _, err := io.ReadFull(c.client, c.recv); err != nil {
					errs <- fmt.Errorf("bench: duplex read: %w", err)
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range 2 * len(p.conns) {
		if err := <-errs; err != nil && first == nil {
			first = err
			p.Close() // unblocks the other goroutines
		}
	}
	return first
}

// Close closes every connection and waits for the servers.
func (p *duplexPair) Close() {
	p.closeOnce.Do(func() {
		for _, c := range p.conns {
			c.client.Close()
		}
	})
	p.served.Wait()
}

// streamPair is iperf3's measurement: one connection, one way, 1 MiB
// writes and reads, and a one-byte acknowledgement at the end.
type streamPair struct {
	client, server net.Conn
	buf            []byte
	served         chan struct{}
}

const streamWrite = 1 << 20

func newStreamPair(ctx context.Context) (*streamPair, error) {
	client, server, err := loopbackPair(ctx)
	if err != nil {
		return nil, err
	}
	p := &streamPair{client: client, server: server, buf: make([]byte, streamWrite), served: make(chan struct{})}
	for i := range p.buf {
		p.buf[i] = byte(i * 13)
	}
	go func() {
		defer close(p.served)
		defer server.Close()
		var hdr [8]byte
		in := make([]byte, streamWrite)
		for {
			if _, err := io.ReadFull(server, hdr[:]); err != nil {
				return
			}
			for left := int(binary.LittleEndian.Uint64(hdr[:])); left > 0; {
				n, err := server.Read(in[:min(left, len(in))])
				if err != nil {
					return
				}
				left -= n
			}
			if _, err := server.Write(hdr[:1]); err != nil {
				return
			}
		}
	}()
	context.AfterFunc(ctx, func() { client.Close() })
	return p, nil
}

// round sends bytes (rounded up to whole writes) one way.
func (p *streamPair) round(bytes int) error {
	writes := (bytes + streamWrite - 1) / streamWrite
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(writes*streamWrite))
	if _, err := p.client.Write(hdr[:]); err != nil {
		return fmt.Errorf("bench: stream: %w", err)
	}
	for range writes {
		if _, err := p.client.Write(p.buf); err != nil {
			return fmt.Errorf("bench: stream: %w", err)
		}
	}
	if _, err := io.ReadFull(p.client, hdr[:1]); err != nil {
		return fmt.Errorf("bench: stream ack: %w", err)
	}
	return nil
}

func (p *streamPair) Close() {
	p.client.Close()
	<-p.served
}

// sumVectors adds src into dst, the one pass a sum table's push must make
// over its values; the rate it gives is the memory's, for this machine.
func sumVectors(dst, src []float32) {
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] += x
	}
}

// crcVector is the CRC32C pass every frame's payload gets at each end.
func crcVector(b []byte) uint32 { return crc32c.Checksum(b) }

// ceilings times every ceiling once a round.
type ceilings struct {
	duplex, duplex2 *duplexPair
	stream          *streamPair
	a, b            []float32
}

type ceilingTimes struct {
	duplex, duplex2, stream, sum, crc time.Duration
	duplexCPU                         time.Duration
}

func newCeilings(ctx context.Context, nb int) (*ceilings, error) {
	frame := min(nb, wire.FrameTarget)
	c := &ceilings{a: make([]float32, nb/4), b: make([]float32, nb/4)}
	var err error
	if c.duplex, err = newDuplexPair(ctx, 1, frame); err != nil {
		return nil, err
	}
	if c.duplex2, err = newDuplexPair(ctx, 2, frame); err != nil {
		c.Close()
		return nil, err
	}
	if c.stream, err = newStreamPair(ctx); err != nil {
		c.Close()
		return nil, err
	}
	for i := range c.b {
		c.b[i] = float32(i%5) * 0.25
	}
	return c, nil
}

func (c *ceilings) round(nb int) (t ceilingTimes, err error) {
	c0 := processCPU()
	if t.duplex, err = timed(func() error { return c.duplex.round(nb) }); err != nil {
		return t, err
	}
	t.duplexCPU = processCPU() - c0
	if t.duplex2, err = timed(func() error { return c.duplex2.round(nb) }); err != nil {
		return t, err
	}
	if t.stream, err = timed(func() error { return c.stream.round(nb) }); err != nil {
		return t, err
	}
	t.sum, _ = timed(func() error { sumVectors(c.a, c.b); return nil })
	t.crc, _ = timed(func() error { crcVector(wire.F32Bytes(c.b)); return nil })
	return t, nil
}

func (c *ceilings) Close() {
	if c.duplex != nil {
		c.duplex.Close()
	}
	if c.duplex2 != nil {
		c.duplex2.Close()
	}
	if c.stream != nil {
		c.stream.Close()
	}
}
