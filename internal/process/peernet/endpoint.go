package peernet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/ps"
)

// Options configures an Endpoint; each default is on its field.
type Options struct {
	// Network is what the endpoint listens and dials on (TCP if nil): the
	// node's, so that mutual TLS and emulated links apply.
	Network transport.Network
	Logger  *slog.Logger
	// Queue is how many frames may wait to be written to one peer (16 if
	// 0); a message to a full queue is dropped.
	Queue int
	// Mailbox is how many received messages may wait to be taken (64 if
	// 0), as PeerHub's; beyond that they are dropped.
	Mailbox int
	// DialTimeout and WriteTimeout bound a dial and a write to a peer
	// (500 ms if 0): a dead peer costs a timeout, never a hang.
	DialTimeout, WriteTimeout time.Duration
	// Retry is how long messages to a peer are dropped after a failed dial
	// (1 s if 0), rather than each waiting for a dial of its own.
	Retry time.Duration
	// IdleTimeout closes an inbound connection silent this long (1 min if
	// 0).
	IdleTimeout time.Duration
	// MaxConns bounds the inbound connections open at once (64 if 0).
	MaxConns int
}

func (o Options) withDefaults() Options {
	o.Network = transport.OrTCP(o.Network)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Queue, 16)
	def(&o.Mailbox, 64)
	def(&o.MaxConns, 64)
	defDur(&o.DialTimeout, 500*time.Millisecond)
	defDur(&o.WriteTimeout, 500*time.Millisecond)
	defDur(&o.Retry, time.Second)
	defDur(&o.IdleTimeout, time.Minute)
	return o
}

// Stats counts an endpoint's messages.
type Stats struct {
	// Sent are messages written to a peer's connection.
	Sent int64 `json:"sent"`
	// Dropped are messages not sent: no address for the rank, a full
	// queue, a peer that could not be dialled or written to.
	Dropped int64 `json:"dropped"`
	// Received are messages taken into the mailbox; Refused frames that
	// were not messages (each closed its connection); Discarded messages
	// addressed to another rank or arriving to a full mailbox.
	Received  int64 `json:"received"`
	Refused   int64 `json:"refused"`
	Discarded int64 `json:"discarded"`
}

// Endpoint is a worker's end of the peer network: it listens for its
// peers' frames and, once bound to a rank, sends to theirs. It is a
// ps.Peers.
type Endpoint struct {
	o      Options
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	inbox  chan ps.PeerMessage
	slots  chan struct{} // inbound connections' semaphore

	me      atomic.Int64 // this worker's rank, -1 until Bind
	resolve atomic.Pointer[func(rank int) string]

	mu     sync.Mutex
	closed bool // no sender starts after Close: its wg.Add would race the Wait
	peers  map[int]*peer
	conns  map[net.Conn]bool

	sent, dropped, received, refused, discarded atomic.Int64
}

// Listen starts an endpoint listening on addr until ctx ends or Close.
func Listen(ctx context.Context, addr string, o Options) (*Endpoint, error) {
	o = o.withDefaults()
	ln, err := o.Network.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("peernet: listen on %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	e := &Endpoint{o: o, ln: ln, ctx: ctx, cancel: cancel, inbox: make(chan ps.PeerMessage, o.Mailbox),
		slots: make(chan struct{}, o.MaxConns), peers: map[int]*peer{}, conns: map[net.Conn]bool{}}
	e.me.Store(-1)
	e.wg.Add(2)
	go func() {
		defer e.wg.Done()
		<-ctx.Done()
		e.ln.Close()
		e.mu.Lock()
		for c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
	}()
	go e.accept()
	return e, nil
}

// Addr is the address the endpoint listens on.
func (e *Endpoint) Addr() string { return e.ln.Addr().String() }

// Bind makes the endpoint rank's, sending to the address resolve gives
// for a peer's rank ("" if it has none) at each send: resolve reads the
// current layout, so that groups follow membership.
func (e *Endpoint) Bind(rank int, resolve func(rank int) string) {
	e.resolve.Store(&resolve)
	e.me.Store(int64(rank))
}

// Send sends m to rank to, best effort: it never blocks, and drops the
// message when the rank has no address, the endpoint is not bound, or
// the peer's queue is full.
func (e *Endpoint) Send(to int, m ps.PeerMessage) {
	me, resolve := int(e.me.Load()), e.resolve.Load()
	if me < 0 || resolve == nil || e.ctx.Err() != nil {
		e.dropped.Add(1)
		return
	}
	addr := (*resolve)(to)
	m.From = me
	frame, err := Append(nil, Frame{To: to, M: m})
	if addr == "" || err != nil {
		e.dropped.Add(1)
		return
	}
	p := e.peer(to, addr)
	if p == nil {
		e.dropped.Add(1)
		return
	}
	select {
	case p.q <- frame:
	default:
		e.dropped.Add(1)
	}
}

// Receive returns the messages peers sent this endpoint's rank.
func (e *Endpoint) Receive() <-chan ps.PeerMessage { return e.inbox }

// Stats returns the endpoint's counts so far.
func (e *Endpoint) Stats() Stats {
	return Stats{Sent: e.sent.Load(), Dropped: e.dropped.Load(), Received: e.received.Load(), Refused: e.refused.Load(), Discarded: e.discarded.Load()}
}

var descPeerMessages = prometheus.NewDesc("terrace_worker_peer_messages_total",
	"Progress messages among peers, by outcome: sent, dropped (no address, full queue, peer unreachable), received, refused (not a message; the connection was closed), discarded (another rank's, or a full mailbox).",
	[]string{"outcome"}, nil)

// Collector returns the endpoint's counts for a Prometheus registry.
func (e *Endpoint) Collector() prometheus.Collector { return (*endpointCollector)(e) }

type endpointCollector Endpoint

func (c *endpointCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descPeerMessages }

func (c *endpointCollector) Collect(ch chan<- prometheus.Metric) {
	st := (*Endpoint)(c).Stats()
	for _, o := range []struct {
		outcome string
		n       int64
	}{{"sent", st.Sent}, {"dropped", st.Dropped}, {"received", st.Received}, {"refused", st.Refused}, {"discarded", st.Discarded}} {
		ch <- prometheus.MustNewConstMetric(descPeerMessages, prometheus.CounterValue, float64(o.n), o.outcome)
	}
}

// Close stops the endpoint and waits for its goroutines.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.cancel()
	e.wg.Wait()
	return nil
}

// peer is the sending side to one rank at one address.
type peer struct {
	addr string
	q    chan []byte
	stop context.CancelFunc
}

// peer returns the sender to rank at addr, replacing one to an address
// the rank no longer has; nil once the endpoint is closed.
func (e *Endpoint) peer(rank int, addr string) *peer {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	p := e.peers[rank]
	if p != nil && p.addr == addr {
		return p
	}
	if p != nil {
		p.stop()
	}
	ctx, stop := context.WithCancel(e.ctx)
	p = &peer{addr: addr, q: make(chan []byte, e.o.Queue), stop: stop}
	e.peers[rank] = p
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.write(ctx, p)
	}()
	return p
}

// write sends p's queued frames, dialling when it has one and no
// connection; frames that cannot be written are dropped.
func (e *Endpoint) write(ctx context.Context, p *peer) {
	var conn net.Conn
	var retryAt time.Time
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	var buf []byte
	for {
		var f []byte
		select {
		case <-ctx.Done():
			return
		case f = <-p.q:
		}
		// Whatever else is queued goes in the same write.
		buf = append(buf[:0], f...)
		n := int64(1)
	more:
		for {
			select {
			case f := <-p.q:
				buf, n = append(buf, f...), n+1
			default:
				break more
			}
		}
		if conn == nil {
			if time.Now().Before(retryAt) {
				e.dropped.Add(n)
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, e.o.DialTimeout)
			c, err := e.o.Network.Dial(dctx, p.addr)
			cancel()
			if err != nil {
				e.o.Logger.Debug("peer unreachable: dropping its messages for a while", "peer", p.addr, "for", e.o.Retry, "err", err)
				retryAt = time.Now().Add(e.o.Retry)
				e.dropped.Add(n)
				continue
			}
			conn = c
		}
		conn.SetWriteDeadline(time.Now().Add(e.o.WriteTimeout))
		if _, err := conn.Write(buf); err != nil {
			e.o.Logger.Debug("peer write failed: dropping messages", "peer", p.addr, "err", err)
			conn.Close()
			conn = nil
			e.dropped.Add(n)
			continue
		}
		e.sent.Add(n)
	}
}

// accept serves inbound connections, up to MaxConns at once.
func (e *Endpoint) accept() {
	defer e.wg.Done()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			if e.ctx.Err() == nil {
				e.o.Logger.Warn("peer listener stopped", "addr", e.Addr(), "err", err)
			}
			return
		}
		select {
		case e.slots <- struct{}{}:
		default:
			e.o.Logger.Warn("peer connection refused: too many open", "peer", c.RemoteAddr(), "max", e.o.MaxConns)
			c.Close()
			continue
		}
		e.mu.Lock()
		if e.ctx.Err() != nil {
			e.mu.Unlock()
			c.Close()
			return
		}
		e.conns[c] = true
		e.mu.Unlock()
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.read(c)
			e.mu.Lock()
			delete(e.conns, c)
			e.mu.Unlock()
			c.Close()
			<-e.slots
		}()
	}
}

// read takes frames from one inbound connection until it ends, is idle
// for IdleTimeout or sends something that is not a frame.
func (e *Endpoint) read(c net.Conn) {
	var prefix [lengthLen]byte
	body := make([]byte, MaxFrame)
	for {
		c.SetReadDeadline(time.Now().Add(e.o.IdleTimeout))
		if _, err := io.ReadFull(c, prefix[:]); err != nil {
			return
		}
		n, err := Length(prefix)
		if err == nil {
			if _, err = io.ReadFull(c, body[:n]); err != nil {
				return
			}
		}
		var f Frame
		if err == nil {
			f, err = Decode(body[:n])
		}
		if err != nil {
			e.refused.Add(1)
			e.o.Logger.Warn("peer message refused: closing its connection", "peer", c.RemoteAddr(), "err", err)
			return
		}
		e.deliver(f)
	}
}

// deliver puts a message for this rank in the mailbox, if there is room.
func (e *Endpoint) deliver(f Frame) {
	if int64(f.To) != e.me.Load() {
		e.discarded.Add(1) // for a rank this process no longer (or not yet) is
		return
	}
	select {
	case e.inbox <- f.M:
		e.received.Add(1)
	default:
		e.discarded.Add(1)
	}
}

// Announced is the address peers should dial: Addr, its host replaced by
// the one this host reaches via from if it listens on every address
// (":0", "0.0.0.0:0").
func (e *Endpoint) Announced(via string) (string, error) {
	host, port, err := net.SplitHostPort(e.Addr())
	if err != nil {
		return "", fmt.Errorf("peernet: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return e.Addr(), nil
	}
	if host, err = LocalIP(via); err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}

// FromLayout resolves a rank to its peer address in the current layout
// (a ps.Client's Layout): none for a rank that died or departed
// (Finished), so that messages to it are dropped at once instead of
// waiting for a dial that fails.
func FromLayout(current func() *layout.Layout) func(rank int) string {
	return func(rank int) string {
		l := current()
		if l == nil || slices.Contains(l.Finished, rank) {
			return ""
		}
		return l.PeerAddrs[rank]
	}
}

// LocalIP is the address this host reaches addr from: a connected UDP
// socket picks the route and sends nothing. It is the default host of a
// worker's peer port, the one its other traffic leaves from.
func LocalIP(addr string) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", fmt.Errorf("peernet: route to %s: %w", addr, err)
	}
	defer c.Close()
	a, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok {
		return "", errors.New("peernet: no local address")
	}
	return a.IP.String(), nil
}
