package transport

import (
	"bytes"
	"net"
	"testing"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// TestReadPayloadVecAllocatesNothing: a reply read straight into a
// hundred runs of the caller's vector (a pull over a range spread over
// servers) lands byte for byte, its CRC checked, and allocates nothing
// per frame: the list of buffers still to fill and readv(2)'s iovecs are
// the connection's, reused, where they were built anew for every read.
func TestReadPayloadVecAllocatesNothing(t *testing.T) {
	const runs, runBytes, frames = 100, 4 << 10, 50
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	head := []byte("prefix!!")
	body := make([]byte, runs*runBytes)
	for i := range body {
		body[i] = byte(i * 7)
	}
	var frame bytes.Buffer
	if _, err := wire.NewFrame(wire.Header{Type: wire.TReply}, head, body).WriteTo(&frame); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			errs <- err
			return
		}
		defer nc.Close()
		for range frames + 1 { // AllocsPerRun runs once more to warm up
			if _, err := nc.Write(frame.Bytes()); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := NewConn(nc, 0)
	defer c.Close()
	if c.Reader.Vec == nil {
		t.Fatal("no vectored reader on a TCP connection")
	}
	dst := make([]byte, len(body))
	bodies := make([][]byte, runs)
	for i := range bodies {
		bodies[i] = dst[i*runBytes : (i+1)*runBytes]
	}
	var gotHead [8]byte
	allocs := testing.AllocsPerRun(frames, func() {
		clear(dst)
		h, err := c.Reader.Next()
		if err == nil {
			err = c.Reader.ReadPayloadVec(h, gotHead[:], bodies)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotHead[:], head) || !bytes.Equal(dst, body) {
		t.Fatal("payload read into the runs differs from the one sent")
	}
	if allocs != 0 {
		t.Errorf("%.1f allocations per frame, want 0", allocs)
	}
}
