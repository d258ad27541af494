package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// ErrClosed is returned for sends on a closed connection.
var ErrClosed = errors.New("transport: connection closed")

// DefaultWriteTimeout bounds one vectored write. A peer that stops reading
// for this long is treated as lost, so a sender never blocks forever.
const DefaultWriteTimeout = 10 * time.Second

// maxBatch bounds how many bytes of queued frames one write gathers.
const maxBatch = 8 << 20

// sumBatch bounds the bytes of frames the writer sums itself (unsummed
// frames on a connection that does not authenticate its bytes) that one
// write gathers: the sum reads them into the cache, and the kernel's copy
// that follows should find them there, not a batch later.
const sumBatch = 1 << 20

// Outgoing is a frame queued for writing. Done, when set, runs after the
// frame was written or dropped, so that the sender can recycle the memory
// the frame points into.
type Outgoing struct {
	Frame *wire.Frame
	Done  func(err error)
}

// BuffersWriter is implemented by connections that write a batch of
// buffers better as one than buffer by buffer, as net.Buffers does for
// any net.Conn but a socket (tlsnet's gathers the TLS records of a batch
// into one system call).
type BuffersWriter interface {
	WriteBuffers(b *net.Buffers) (int64, error)
}

// Authenticator is implemented by connections that authenticate every
// byte they carry (tlsnet's: TLS's AEAD): frames on them need no payload
// CRC (wire.FlagUnsummed).
type Authenticator interface {
	Authenticated() bool
}

// Conn is one framed TCP connection. Any goroutine may Send; one
// goroutine, owned by the Conn, writes.
type Conn struct {
	nc           net.Conn
	bw           BuffersWriter // nc's, or its rawSock's; nil for net.Buffers' own
	Reader       *wire.Reader
	WriteTimeout time.Duration
	auth         bool
	hdrs         [][wire.HeaderSize]byte // the writer's: summed headers of unsummed frames

	mu      sync.Mutex
	queue   []Outgoing
	err     error
	wake    chan struct{}
	stopped chan struct{}
}

// readBuffer is the read-ahead under a connection's frame reader: one
// read takes in every small frame that has arrived (a push's reply, a
// clock, a ping), where reading each frame's header and payload from the
// socket cost two system calls a frame. A payload at least this large is
// read past it, straight into its destination, as before: only its first
// and last few kilobytes pass through the buffer.
const readBuffer = 64 << 10

// NewConn wraps nc and starts its writer.
func NewConn(nc net.Conn, maxPayload int) *Conn {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetReadBuffer(4 << 20)
		tc.SetWriteBuffer(4 << 20)
	}
	a, ok := nc.(Authenticator)
	var r io.Reader = nc
	bw, _ := nc.(BuffersWriter)
	s := newRawSock(nc)
	if s != nil {
		r, bw = s, s
	}
	br := bufio.NewReaderSize(r, readBuffer)
	c := &Conn{
		nc:           nc,
		bw:           bw,
		Reader:       wire.NewReader(br, maxPayload),
		WriteTimeout: DefaultWriteTimeout,
		auth:         ok && a.Authenticated(),
		wake:         make(chan struct{}, 1),
		stopped:      make(chan struct{}),
	}
	c.Reader.Authenticated = c.auth
	if s != nil {
		c.Reader.Vec = newVecReader(s.rc, br)
	}
	go c.writeLoop()
	return c
}

// Authenticated reports whether the connection authenticates every byte
// it carries: frames for it may then leave their payload out of the CRC
// (wire.NewFrameOn).
func (c *Conn) Authenticated() bool { return c.auth }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Send queues a frame. It never blocks on the network.
func (c *Conn) Send(o Outgoing) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		if o.Done != nil {
			o.Done(err)
		}
		return err
	}
	c.queue = append(c.queue, o)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// Close closes the connection; queued frames are dropped with ErrClosed.
func (c *Conn) Close() error { return c.fail(ErrClosed) }

// Err returns why the connection failed, or nil.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Done is closed when the writer has stopped.
func (c *Conn) Done() <-chan struct{} { return c.stopped }

func (c *Conn) fail(err error) error {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil
	}
	c.err = err
	q := c.queue
	c.queue = nil
	c.mu.Unlock()
	cerr := c.nc.Close()
	for _, o := range q {
		if o.Done != nil {
			o.Done(err)
		}
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return cerr
}

func (c *Conn) writeLoop() {
	defer close(c.stopped)
	var batch []Outgoing
	var bufs net.Buffers
	for range c.wake {
		for {
			c.mu.Lock()
			if c.err != nil {
				c.mu.Unlock()
				return
			}
			// Take as many queued frames as fit in one batch: many small
			// requests then cost one system call.
			n, size, summing := 0, 0, 0
			for n < len(c.queue) && (n == 0 || size+c.queue[n].Frame.Size() <= maxBatch) && summing < sumBatch {
				f := c.queue[n].Frame
				size += f.Size()
				if !c.auth && f.Unsummed() {
					summing += f.Size()
				}
				n++
			}
			batch = append(batch[:0], c.queue[:n]...)
			c.queue = c.queue[:copy(c.queue, c.queue[n:])]
			c.mu.Unlock()
			if n == 0 {
				break
			}
			bufs = bufs[:0]
			if !c.auth && len(c.hdrs) < n {
				c.hdrs = make([][wire.HeaderSize]byte, n)
			}
			for i, o := range batch {
				if c.auth {
					bufs = o.Frame.AppendTo(bufs)
				} else {
					bufs = o.Frame.AppendSummedTo(bufs, &c.hdrs[i])
				}
			}
			if c.WriteTimeout > 0 {
				c.nc.SetWriteDeadline(time.Now().Add(c.WriteTimeout))
			}
			w := bufs // WriteTo consumes its receiver
			var err error
			if c.bw != nil {
				_, err = c.bw.WriteBuffers(&w)
			} else {
				_, err = w.WriteTo(c.nc)
			}
			if err != nil {
				err = fmt.Errorf("transport: write to %s: %w", c.nc.RemoteAddr(), err)
			}
			for _, o := range batch {
				if o.Done != nil {
					o.Done(err)
				}
			}
			clear(batch)
			if err != nil {
				c.fail(err)
				return
			}
		}
	}
}
