package link

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Clock is the time the buckets run on: the real one, or a fake in tests.
type Clock interface {
	Now() time.Time
	// After is like time.After.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Options configure a Link; zero fields take the defaults.
type Options struct {
	// Burst is the bucket's depth in bytes, and the largest piece a read
	// or write is cut into: 50 ms of the rate, at least 64 KiB. A shallower
	// bucket loses rate on a loaded host, where a goroutine can wait longer
	// than the bucket takes to fill (measured: 0.81-0.97 of the target with
	// 10 ms at a load of 5 on 2 cores).
	Burst int
	// Clock is the real clock by default.
	Clock Clock
}

// Link is one machine's link: BytesPerSecond in each direction (full
// duplex, as cloud NICs are), shared by every connection it wraps.
type Link struct {
	in, out *rate.Limiter
	burst   int
	clock   Clock

	mu     sync.Mutex
	counts map[string]*counter
}

type counter struct{ in, out atomic.Int64 }

// Counts are the bytes that crossed a link, by direction.
type Counts struct {
	In  int64 `json:"in"`
	Out int64 `json:"out"`
}

// New returns a link of bytesPerSecond each way; 0 means unlimited (the
// link then only counts).
func New(bytesPerSecond float64, opts Options) *Link {
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.Burst <= 0 {
		opts.Burst = max(64<<10, int(bytesPerSecond/20))
	}
	limit := rate.Limit(bytesPerSecond)
	if bytesPerSecond <= 0 {
		limit = rate.Inf
	}
	return &Link{
		in:     rate.NewLimiter(limit, opts.Burst),
		out:    rate.NewLimiter(limit, opts.Burst),
		burst:  opts.Burst,
		clock:  opts.Clock,
		counts: map[string]*counter{},
	}
}

// Counts returns the bytes each label's connections moved.
func (l *Link) Counts() map[string]Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]Counts, len(l.counts))
	for k, c := range l.counts {
		out[k] = Counts{In: c.in.Load(), Out: c.out.Load()}
	}
	return out
}

func (l *Link) counter(label string) *counter {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.counts[label]
	if c == nil {
		c = &counter{}
		l.counts[label] = c
	}
	return c
}

// Wrap paces c's reads and writes on the link, counting them under label
// (say "data", "replication", "stream"). Connections between two nodes of
// the same machine must not be wrapped: they never cross its link.
func (l *Link) Wrap(c net.Conn, label string) net.Conn {
	return &conn{Conn: c, l: l, n: l.counter(label), closed: make(chan struct{})}
}

// WrapListener wraps every connection ln accepts.
func (l *Link) WrapListener(ln net.Listener, label string) net.Listener {
	return &listener{Listener: ln, l: l, label: label}
}

type listener struct {
	net.Listener
	l     *Link
	label string
}

func (ln *listener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return ln.l.Wrap(c, ln.label), nil
}

type conn struct {
	net.Conn
	l *Link
	n *counter

	closeOnce sync.Once
	closed    chan struct{}
	// Deadlines as Unix nanoseconds (0: none), so that a wait for tokens
	// ends where the socket operation would have.
	readDeadline, writeDeadline atomic.Int64
}

// errTimeout is what a wait that reaches a deadline returns, as the
// socket would.
var errTimeout = os.ErrDeadlineExceeded

func (c *conn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), c.l.burst)]
		if err := c.wait(c.l.out, len(chunk), &c.writeDeadline); err != nil {
			return written, &net.OpError{Op: "write", Net: "link", Err: err}
		}
		n, err := c.Conn.Write(chunk)
		written += n
		c.n.out.Add(int64(n))
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

// Read reads at most one bucket's depth and then pays for what it read:
// the bytes are already off the wire, and holding them back throttles the
// sender through TCP's window as a slow link would.
func (c *conn) Read(p []byte) (int, error) {
	if len(p) > c.l.burst {
		p = p[:c.l.burst]
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.n.in.Add(int64(n))
		if werr := c.wait(c.l.in, n, &c.readDeadline); werr != nil && err == nil && !errors.Is(werr, errTimeout) {
			err = werr
		}
	}
	return n, err
}

// wait takes n tokens from lim, waiting for them until they come, the
// deadline passes (errTimeout) or the connection closes (net.ErrClosed).
func (c *conn) wait(lim *rate.Limiter, n int, deadline *atomic.Int64) error {
	now := c.l.clock.Now()
	r := lim.ReserveN(now, n)
	if !r.OK() {
		return errors.New("link: piece larger than the bucket") // cannot happen: pieces are cut to it
	}
	delay := r.DelayFrom(now)
	if delay <= 0 {
		return nil
	}
	var err error
	if d := deadline.Load(); d != 0 {
		if until := time.Unix(0, d).Sub(now); until < delay {
			delay, err = max(until, 0), errTimeout
		}
	}
	select {
	case <-c.l.clock.After(delay):
	case <-c.closed:
		r.CancelAt(c.l.clock.Now())
		return net.ErrClosed
	}
	if err != nil {
		r.CancelAt(c.l.clock.Now())
	}
	return err
}

func (c *conn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *conn) SetDeadline(t time.Time) error {
	setDeadline(&c.readDeadline, t)
	setDeadline(&c.writeDeadline, t)
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	setDeadline(&c.readDeadline, t)
	return c.Conn.SetReadDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	setDeadline(&c.writeDeadline, t)
	return c.Conn.SetWriteDeadline(t)
}

func setDeadline(d *atomic.Int64, t time.Time) {
	if t.IsZero() {
		d.Store(0)
	} else {
		d.Store(t.UnixNano())
	}
}
