package transport

import (
	"bytes"
	"net"
	"sync"
	"testing"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// batchConn records the bytes of each vectored write; the first waits
// for gate, so that every frame of the test is queued by then.
type batchConn struct {
	net.Conn
	gate    chan struct{}
	mu      sync.Mutex
	batches []int64
	out     bytes.Buffer
}

func (c *batchConn) WriteBuffers(b *net.Buffers) (int64, error) {
	<-c.gate
	n, err := b.WriteTo(&c.out)
	c.mu.Lock()
	c.batches = append(c.batches, n)
	c.mu.Unlock()
	return n, err
}

// TestWriterSumsFramesBatchByBatch: on a plain connection the writer sums
// the unsummed frames it is handed (a large push's values, left for it to
// sum, ps.Table.send) a batch at a time and writes each batch before it
// sums the next, so that the kernel's copy reads what the sum has just
// brought into the cache; summed frames of the same size still go out
// many to a write. Every frame arrives summed and intact.
func TestWriterSumsFramesBatchByBatch(t *testing.T) {
	const frames, size = 12, 512 << 10
	payload := bytes.Repeat([]byte{7}, size)
	for _, unsummed := range []bool{true, false} {
		a, b := net.Pipe()
		b.Close()
		bc := &batchConn{Conn: a, gate: make(chan struct{})}
		c := NewConn(bc, 0)
		var written sync.WaitGroup
		written.Add(frames)
		for i := range frames {
			f := wire.NewFrameOn(wire.Header{Type: wire.TPush, ReqID: uint64(i)}, unsummed, payload)
			c.Send(Outgoing{Frame: f, Done: func(error) { written.Done() }})
		}
		close(bc.gate)
		written.Wait()
		c.Close()
		largest := int64(0)
		for _, n := range bc.batches {
			largest = max(largest, n)
		}
		frame := int64(wire.HeaderSize + size)
		if unsummed && largest > sumBatch+frame {
			t.Errorf("a write of %d bytes of frames the writer summed (at most %d)", largest, sumBatch+frame)
		}
		if !unsummed && largest < 3*frame {
			t.Errorf("summed frames went out at most %d bytes a write: not batched", largest)
		}
		r := wire.NewReader(&bc.out, 0)
		for range frames {
			h, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if h.Flags&wire.FlagUnsummed != 0 {
				t.Fatal("a frame went out unsummed on a plain connection")
			}
			p, err := r.Payload(h)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, payload) {
				t.Fatal("payload changed")
			}
		}
	}
}
