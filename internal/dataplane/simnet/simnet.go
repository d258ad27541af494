package simnet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config configures a Net.
type Config struct {
	// Seed picks each link's base delay, from the names of its two hosts, so
	// that a link's delay does not depend on the order connections are made.
	Seed uint64
	// MinDelay and MaxDelay bound the one-way delay of a link.
	MinDelay, MaxDelay time.Duration
	// Buffer bounds the bytes written one way on a connection and not yet
	// read (the two sockets' buffers together); a writer waits beyond it
	// (256 KiB if 0).
	Buffer int
}

// Net is an in-memory network of named hosts. The zero value is not
// usable; call New.
type Net struct {
	cfg Config

	mu        sync.Mutex
	listeners map[string]*listener // by address
	ports     map[string]int       // last port handed out, by host
	down      map[string]bool      // crashed hosts
	links     map[[2]string]*link  // by sorted pair of hosts
	conns     map[*pipe]struct{}   // connections not yet closed or reset
	nextConn  uint64
	closed    bool
}

// New returns an empty network.
func New(cfg Config) *Net {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 256 << 10
	}
	cfg.MaxDelay = max(cfg.MaxDelay, cfg.MinDelay)
	return &Net{
		cfg:       cfg,
		listeners: map[string]*listener{},
		ports:     map[string]int{},
		down:      map[string]bool{},
		links:     map[[2]string]*link{},
		conns:     map[*pipe]struct{}{},
	}
}

// link is the path between two hosts.
type link struct {
	base  time.Duration
	extra atomic.Int64 // a latency spike, in nanoseconds
	cut   atomic.Bool  // partitioned: bytes are held, dials wait
	// healed is closed and replaced when a partition heals; guarded by Net.mu.
	healed chan struct{}
}

func (l *link) delay() time.Duration { return l.base + time.Duration(l.extra.Load()) }

// linkLocked returns the link between hosts a and b; n.mu is held.
func (n *Net) linkLocked(a, b string) *link {
	if b < a {
		a, b = b, a
	}
	l := n.links[[2]string{a, b}]
	if l == nil {
		h := fnv.New64a()
		fmt.Fprintf(h, "%d\x00%s\x00%s", n.cfg.Seed, a, b)
		span := uint64(n.cfg.MaxDelay-n.cfg.MinDelay) + 1
		l = &link{base: n.cfg.MinDelay + time.Duration(h.Sum64()%span), healed: make(chan struct{})}
		n.links[[2]string{a, b}] = l
	}
	return l
}

// Host returns host name's view of the network: what it listens and dials
// on. It implements transport.Network.
func (n *Net) Host(name string) *Host { return &Host{n: n, name: name} }

// Host is one host of a Net.
type Host struct {
	n    *Net
	name string
}

// Listen listens on the host: addr's port (a free one if 0) on the host's
// own name; addr's host part is ignored, as for a wildcard address.
func (h *Host) Listen(addr string) (net.Listener, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("simnet: listen %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("simnet: listen %q: bad port", addr)
	}
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down[h.name] || n.closed {
		return nil, &net.OpError{Op: "listen", Net: "sim", Err: errHostDown}
	}
	if p == 0 {
		p = n.portLocked(h.name)
	}
	a := Addr(net.JoinHostPort(h.name, strconv.Itoa(p)))
	if n.listeners[string(a)] != nil {
		return nil, &net.OpError{Op: "listen", Net: "sim", Addr: a, Err: syscall.EADDRINUSE}
	}
	l := &listener{n: n, host: h.name, addr: a, backlog: make(chan *end, 128), done: make(chan struct{})}
	n.listeners[string(a)] = l
	return l, nil
}

func (n *Net) portLocked(host string) int {
	p := n.ports[host]
	if p == 0 {
		p = 1000
	}
	n.ports[host] = p + 1
	return p
}

var errHostDown = errors.New("simnet: host is down")

// Dial connects from the host to addr. It takes a round trip of the link's
// delay; across a partition it waits for the partition to heal or ctx to
// end, as a lost SYN would.
func (h *Host) Dial(ctx context.Context, addr string) (net.Conn, error) {
	to, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("simnet: dial %q: %w", addr, err)
	}
	n := h.n
	fail := func(err error) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "sim", Addr: Addr(addr), Err: err}
	}
	for {
		n.mu.Lock()
		if n.down[h.name] || n.closed {
			n.mu.Unlock()
			return fail(errHostDown)
		}
		lk := n.linkLocked(h.name, to)
		healed := lk.healed
		n.mu.Unlock()
		if lk.cut.Load() {
			select {
			case <-healed:
				continue
			case <-ctx.Done():
				return fail(ctxErr(ctx))
			}
		}
		t := time.NewTimer(2 * lk.delay())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fail(ctxErr(ctx))
		}
		n.mu.Lock()
		if lk.cut.Load() {
			n.mu.Unlock()
			continue // cut while the SYN was on its way
		}
		if n.down[h.name] || n.closed {
			n.mu.Unlock()
			return fail(errHostDown)
		}
		ln := n.listeners[addr]
		if ln == nil {
			n.mu.Unlock()
			return fail(syscall.ECONNREFUSED)
		}
		local := Addr(net.JoinHostPort(h.name, strconv.Itoa(n.portLocked(h.name))))
		p := n.newPipeLocked(lk, h.name, local, to, ln.addr)
		select {
		case ln.backlog <- p.ends[1]:
		default:
			n.resetLocked(p)
			n.mu.Unlock()
			return fail(syscall.ECONNREFUSED)
		}
		n.mu.Unlock()
		return p.ends[0], nil
	}
}

func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return os.ErrDeadlineExceeded
	}
	return ctx.Err()
}

// Crash takes host down at once, as a killed machine: its listeners close,
// every connection with an end on it is reset (bytes still in flight either
// way are lost, and the peers' reads and writes fail with ECONNRESET), and
// it can neither listen nor dial any more. Dials to its addresses are
// refused.
func (n *Net) Crash(host string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down[host] = true
	for _, l := range n.listeners {
		if l.host == host {
			n.closeListenerLocked(l)
		}
	}
	for p := range n.conns {
		if p.hosts[0] == host || p.hosts[1] == host {
			n.resetLocked(p)
		}
	}
}

// Partition cuts the link between hosts a and b: bytes written on their
// connections are held, not delivered, until Heal (or until a write
// deadline fails the writer, as TCP's retransmissions would give up), and
// dials between them wait.
func (n *Net) Partition(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.linkLocked(a, b).cut.Store(true)
}

// Heal ends a partition between a and b: held bytes are delivered, in
// order, and waiting dials go on.
func (n *Net) Heal(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	lk := n.linkLocked(a, b)
	if !lk.cut.Swap(false) {
		return
	}
	close(lk.healed)
	lk.healed = make(chan struct{})
	for p := range n.conns {
		if p.link == lk {
			p.streams[0].wakeAll()
			p.streams[1].wakeAll()
		}
	}
}

// Delay adds extra to the one-way delay of the link between a and b, for
// bytes written from now on (0 ends a spike). Bytes already sent keep their
// delivery time, and nothing overtakes what was sent before it.
func (n *Net) Delay(a, b string, extra time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.linkLocked(a, b).extra.Store(int64(extra))
}

// Drop resets one live connection, chosen with r among them in the order
// they were made, and returns the hosts at its ends; ok is false if there
// is none.
func (n *Net) Drop(r *rand.Rand) (a, b string, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.conns) == 0 {
		return "", "", false
	}
	live := make([]*pipe, 0, len(n.conns))
	for p := range n.conns {
		live = append(live, p)
	}
	slices.SortFunc(live, func(x, y *pipe) int { return cmp.Compare(x.id, y.id) })
	p := live[r.IntN(len(live))]
	n.resetLocked(p)
	return p.hosts[0], p.hosts[1], true
}

// Close shuts the whole network: every listener closes and every
// connection is reset. Simulations call it last, so that no goroutine
// stays blocked on the network.
func (n *Net) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for _, l := range n.listeners {
		n.closeListenerLocked(l)
	}
	for p := range n.conns {
		n.resetLocked(p)
	}
}

// Addr is an address on a Net: "host:port".
type Addr string

// Network implements net.Addr.
func (Addr) Network() string { return "sim" }

func (a Addr) String() string { return string(a) }

type listener struct {
	n       *Net
	host    string
	addr    Addr
	backlog chan *end
	done    chan struct{}
	closed  bool // guarded by Net.mu
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case e := <-l.backlog:
		return e, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "sim", Addr: l.addr, Err: net.ErrClosed}
	}
}

func (l *listener) Close() error {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	if l.closed {
		return &net.OpError{Op: "close", Net: "sim", Addr: l.addr, Err: net.ErrClosed}
	}
	l.n.closeListenerLocked(l)
	return nil
}

func (l *listener) Addr() net.Addr { return l.addr }

// closeListenerLocked closes l and resets the connections it had not
// accepted yet; n.mu is held.
func (n *Net) closeListenerLocked(l *listener) {
	if l.closed {
		return
	}
	l.closed = true
	close(l.done)
	delete(n.listeners, string(l.addr))
	for {
		select {
		case e := <-l.backlog:
			n.resetLocked(e.p)
		default:
			return
		}
	}
}

// pipe is one connection: ends[0] dialled, ends[1] accepted; streams[i]
// carries the bytes ends[i] writes.
type pipe struct {
	id      uint64
	link    *link
	hosts   [2]string
	ends    [2]*end
	streams [2]*stream
}

func (n *Net) newPipeLocked(lk *link, from string, local Addr, to string, remote Addr) *pipe {
	n.nextConn++
	p := &pipe{id: n.nextConn, link: lk, hosts: [2]string{from, to}}
	for i := range p.streams {
		p.streams[i] = &stream{cap: n.cfg.Buffer, wake: make(chan struct{})}
	}
	p.ends[0] = &end{n: n, p: p, in: p.streams[1], out: p.streams[0], local: local, remote: remote}
	p.ends[1] = &end{n: n, p: p, in: p.streams[0], out: p.streams[1], local: remote, remote: local}
	n.conns[p] = struct{}{}
	return p
}

// resetLocked resets connection p: both ends' reads and writes fail; n.mu
// is held.
func (n *Net) resetLocked(p *pipe) {
	delete(n.conns, p)
	for _, s := range p.streams {
		s.mu.Lock()
		s.rst = true
		s.q, s.queued = nil, 0
		s.signal()
		s.mu.Unlock()
	}
}

// stream is one direction of a connection.
type stream struct {
	cap int

	mu     sync.Mutex
	q      []chunk
	queued int  // bytes in q
	eof    bool // the writer closed: reads return io.EOF once q is drained and eofAt has come
	eofAt  time.Time
	gone   bool // the reader closed: writes fail
	rst    bool // reset: reads and writes fail
	rdl    time.Time
	wdl    time.Time
	last   time.Time // delivery time of the newest chunk
	// wake is closed and replaced whenever the stream changes.
	wake chan struct{}
}

type chunk struct {
	b  []byte
	at time.Time // delivered from then on
}

// signal wakes the stream's waiters; s.mu is held.
func (s *stream) signal() {
	close(s.wake)
	s.wake = make(chan struct{})
}

func (s *stream) wakeAll() {
	s.mu.Lock()
	s.signal()
	s.mu.Unlock()
}

// wait blocks until ch is closed or the time until has come (zero: no
// limit).
func wait(ch <-chan struct{}, until time.Time) {
	if until.IsZero() {
		<-ch
		return
	}
	d := time.Until(until)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// end is one side of a connection; it implements net.Conn.
type end struct {
	n             *Net
	p             *pipe
	in, out       *stream
	local, remote Addr
	closed        atomic.Bool
}

func (e *end) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "sim", Source: e.local, Addr: e.remote, Err: err}
}

// Read reads the bytes delivered so far, waiting for the first.
func (e *end) Read(b []byte) (int, error) {
	s := e.in
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		switch {
		case e.closed.Load():
			return 0, e.opError("read", net.ErrClosed)
		case s.rst:
			return 0, e.opError("read", syscall.ECONNRESET)
		case len(b) == 0:
			return 0, nil
		}
		now := time.Now()
		if !s.rdl.IsZero() && !now.Before(s.rdl) {
			return 0, e.opError("read", os.ErrDeadlineExceeded)
		}
		until := s.rdl
		if len(s.q) > 0 && !e.p.link.cut.Load() {
			if !s.q[0].at.After(now) {
				n := 0
				for n < len(b) && len(s.q) > 0 && !s.q[0].at.After(now) {
					c := &s.q[0]
					k := copy(b[n:], c.b)
					n += k
					if c.b = c.b[k:]; len(c.b) == 0 {
						s.q[0] = chunk{}
						s.q = s.q[1:]
					}
				}
				s.queued -= n
				s.signal()
				return n, nil
			}
			if until.IsZero() || s.q[0].at.Before(until) {
				until = s.q[0].at
			}
		}
		if len(s.q) == 0 && s.eof && !e.p.link.cut.Load() {
			if !s.eofAt.After(now) {
				return 0, io.EOF
			}
			if until.IsZero() || s.eofAt.Before(until) {
				until = s.eofAt
			}
		}
		ch := s.wake
		s.mu.Unlock()
		wait(ch, until)
		s.mu.Lock()
	}
}

// Write queues b for delivery after the link's delay, waiting while the
// stream's buffer is full.
func (e *end) Write(b []byte) (int, error) {
	s := e.out
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n < len(b) {
		switch {
		case e.closed.Load():
			return n, e.opError("write", net.ErrClosed)
		case s.rst, s.gone:
			return n, e.opError("write", syscall.ECONNRESET)
		}
		now := time.Now()
		if !s.wdl.IsZero() && !now.Before(s.wdl) {
			return n, e.opError("write", os.ErrDeadlineExceeded)
		}
		if room := s.cap - s.queued; room > 0 {
			k := min(room, len(b)-n)
			at := now.Add(e.p.link.delay())
			if at.Before(s.last) {
				at = s.last
			}
			s.last = at
			s.q = append(s.q, chunk{b: slices.Clone(b[n : n+k]), at: at})
			s.queued += k
			n += k
			s.signal()
			continue
		}
		ch, until := s.wake, s.wdl
		s.mu.Unlock()
		wait(ch, until)
		s.mu.Lock()
	}
	return n, nil
}

// Close closes this end: the peer reads what was sent and then io.EOF, and
// its writes fail.
func (e *end) Close() error {
	if e.closed.Swap(true) {
		return e.opError("close", net.ErrClosed)
	}
	e.out.mu.Lock()
	e.out.eof = true
	e.out.eofAt = time.Now().Add(e.p.link.delay())
	if e.out.eofAt.Before(e.out.last) {
		e.out.eofAt = e.out.last
	}
	e.out.signal()
	e.out.mu.Unlock()
	e.in.mu.Lock()
	e.in.gone = true
	e.in.q, e.in.queued = nil, 0
	e.in.signal()
	e.in.mu.Unlock()
	peer := e.p.ends[0]
	if peer == e {
		peer = e.p.ends[1]
	}
	if peer.closed.Load() {
		e.n.mu.Lock()
		delete(e.n.conns, e.p)
		e.n.mu.Unlock()
	}
	return nil
}

func (e *end) LocalAddr() net.Addr  { return e.local }
func (e *end) RemoteAddr() net.Addr { return e.remote }

func (e *end) SetDeadline(t time.Time) error {
	e.SetReadDeadline(t)
	return e.SetWriteDeadline(t)
}

func (e *end) SetReadDeadline(t time.Time) error {
	e.in.mu.Lock()
	e.in.rdl = t
	e.in.signal()
	e.in.mu.Unlock()
	return nil
}

func (e *end) SetWriteDeadline(t time.Time) error {
	e.out.mu.Lock()
	e.out.wdl = t
	e.out.signal()
	e.out.mu.Unlock()
	return nil
}
