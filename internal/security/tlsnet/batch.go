package tlsnet

import (
	"bufio"
	"net"
	"sync"
)

// batchSize is how much crypto/tls output is gathered into one write.
// crypto/tls writes and reads one 16 KiB record per system call, so a
// 2 MiB data frame cost 128 writes and as many reads, each waking the
// peer's goroutine; gathered, it costs two of each.
const batchSize = 1 << 20

// readAhead is the read buffer under a connection: it holds a whole
// record of ours (record.go), and reads many TLS records at once. It is
// allocated at every dial and accept, so it is no larger than that.
const readAhead = 272 << 10

// batchConn sits under a tls.Conn: it reads ahead in large reads, and
// while armed (during one application Write) gathers the records
// crypto/tls writes, sending them when the Write ends or the buffer
// fills. Unarmed writes (handshake flights, alerts, key updates) go out
// at once.
type batchConn struct {
	net.Conn
	r *bufio.Reader

	left int // bytes of the current TLS record not yet read

	mu    sync.Mutex
	armed bool
	buf   []byte
}

func newBatchConn(nc net.Conn) *batchConn {
	return &batchConn{Conn: nc, r: bufio.NewReaderSize(nc, readAhead)}
}

// Read never returns bytes past the end of the current TLS record, so
// that what follows the handshake's last record, once both ends switch
// to records of their own (record.go), is still in the read-ahead.
func (b *batchConn) Read(p []byte) (int, error) {
	if b.left == 0 {
		h, err := b.r.Peek(5)
		if err != nil {
			return b.r.Read(p)
		}
		b.left = 5 + (int(h[3])<<8 | int(h[4]))
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= n
	return n, err
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.armed {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
		return b.Conn.Write(p)
	}
	if len(b.buf)+len(p) > batchSize {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *batchConn) arm() {
	b.mu.Lock()
	b.armed = true
	b.mu.Unlock()
}

// release disarms and sends what was gathered.
func (b *batchConn) release() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed = false
	return b.flushLocked()
}

func (b *batchConn) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}
