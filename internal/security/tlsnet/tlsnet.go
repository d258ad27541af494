package tlsnet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/security/pki"
)

var (
	// ErrRefused: this node refused a peer's TLS handshake (no
	// certificate, another CA's, an expired one, or not TLS at all).
	ErrRefused = errors.New("tls: refused peer")
	// ErrPeerRefused: the peer refused this node (its certificate, its CA
	// or its name), or this node could not verify the peer.
	ErrPeerRefused = errors.New("tls: handshake with peer failed")
)

// DefaultHandshakeTimeout bounds a handshake, so that a client that
// connects and says nothing holds a goroutine only this long.
const DefaultHandshakeTimeout = 10 * time.Second

// Network wraps an inner Network (TCP if nil) with mutual TLS.
type Network struct {
	inner transport.Network
	src   *pki.Source
	log   *slog.Logger
	// HandshakeTimeout: DefaultHandshakeTimeout if zero.
	HandshakeTimeout time.Duration
}

// New returns a Network over inner (TCP if nil) using src's certificates;
// refusals are logged to log (slog.Default if nil).
func New(inner transport.Network, src *pki.Source, log *slog.Logger) *Network {
	if log == nil {
		log = slog.Default()
	}
	return &Network{inner: transport.OrTCP(inner), src: src, log: log}
}

// Source returns the certificates the network presents.
func (n *Network) Source() *pki.Source { return n.src }

// ClientTLS is the client configuration for addresses this Network does
// not dial itself (etcd's gRPC client), with no fixed server name: the
// caller's library sets it per endpoint.
func (n *Network) ClientTLS() *tls.Config { return n.src.ClientConfig("") }

func (n *Network) timeout() time.Duration {
	if n.HandshakeTimeout > 0 {
		return n.HandshakeTimeout
	}
	return DefaultHandshakeTimeout
}

// Dial connects to addr and completes the handshake, checking that the
// peer's certificate names addr's host.
func (n *Network) Dial(ctx context.Context, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("tls dial %s: %w", addr, err)
	}
	nc, err := n.inner.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	nc = tune(nc)
	bc := newBatchConn(nc)
	cfg := n.src.ClientConfig(host)
	cfg.NextProtos = []string{alpnRecords, "http/1.1"}
	tc := tls.Client(bc, cfg)
	hctx, cancel := context.WithTimeout(ctx, n.timeout())
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w %s: %w", ErrPeerRefused, addr, explain(err))
	}
	if tc.ConnectionState().NegotiatedProtocol == alpnRecords {
		rc, err := newRecConn(nc, bc.r, tc, true, addr, rekeyBytes)
		if err != nil {
			nc.Close()
			return nil, err
		}
		return rc, nil
	}
	return &clientConn{Conn: tc, addr: addr, bc: bc}, nil
}

// Listen listens on addr; each accepted connection handshakes on its
// first read or write, within the handshake timeout, so that one slow
// client does not hold up Accept.
func (n *Network) Listen(addr string) (net.Listener, error) {
	ln, err := n.inner.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &listener{Listener: ln, n: n, cfg: serverConfig(n.src)}, nil
}

// serverConfig offers Terrace's records to a Terrace dialler and
// http/1.1 to any other client, and sends no session tickets: Terrace
// never resumes, and a ticket after the handshake would land where the
// records begin.
func serverConfig(src *pki.Source) *tls.Config {
	cfg := src.ServerConfig()
	inner := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		c, err := inner(hi)
		if err != nil {
			return nil, err
		}
		c.NextProtos = []string{alpnRecords, "http/1.1"}
		c.SessionTicketsDisabled = true
		return c, nil
	}
	return cfg
}

type listener struct {
	net.Listener
	n   *Network
	cfg *tls.Config
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	nc = tune(nc)
	bc := newBatchConn(nc)
	return &serverConn{Conn: tls.Server(bc, l.cfg), n: l.n, bc: bc}, nil
}

// serverConn runs the handshake once, bounded and logged, then carries
// the stream in records of its own if the dialler is a Terrace node.
type serverConn struct {
	*tls.Conn
	bc   *batchConn
	n    *Network
	once sync.Once
	err  error
	rec  *recConn
}

func (c *serverConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.n.timeout())
		defer cancel()
		if err := c.Conn.HandshakeContext(ctx); err != nil {
			answerPlainHTTP(err)
			c.err = fmt.Errorf("%w %s: %v", ErrRefused, c.RemoteAddr(), explain(err))
			c.n.log.Warn("refused connection", "peer", c.RemoteAddr().String(), "err", c.err)
			return
		}
		if c.Conn.ConnectionState().NegotiatedProtocol == alpnRecords {
			c.rec, c.err = newRecConn(c.bc.Conn, c.bc.r, c.Conn, false, c.RemoteAddr().String(), rekeyBytes)
		}
	})
	return c.err
}

func (c *serverConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	if c.rec != nil {
		return c.rec.Read(p)
	}
	return c.Conn.Read(p)
}

func (c *serverConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	if c.rec != nil {
		return c.rec.Write(p)
	}
	return batchWrite(c.Conn, c.bc, p)
}

// CloseWrite (net/http's, before it closes a connection) half-closes
// the TCP connection without a TLS alert once on records.
func (c *serverConn) CloseWrite() error {
	if c.rec != nil {
		return c.rec.CloseWrite()
	}
	return c.Conn.CloseWrite()
}

// Close closes the TCP connection without a TLS alert once on records,
// where the peer would read the alert as a record.
func (c *serverConn) Close() error {
	if c.rec != nil {
		return c.rec.Close()
	}
	return c.Conn.Close()
}

// Authenticated implements transport.Authenticator: every TLS record
// carries an AEAD tag checked as it is decrypted.
func (c *serverConn) Authenticated() bool { return true }

// WriteBuffers implements transport.BuffersWriter.
func (c *serverConn) WriteBuffers(b *net.Buffers) (int64, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	if c.rec != nil {
		return c.rec.WriteBuffers(b)
	}
	return batchWriteBuffers(c.Conn, c.bc, b)
}

// batchWriteBuffers writes every buffer of b through tc, their records
// gathered by bc into as few system calls as fit (transport.BuffersWriter).
func batchWriteBuffers(tc *tls.Conn, bc *batchConn, b *net.Buffers) (int64, error) {
	if bc != nil {
		bc.arm()
	}
	var n int64
	var err error
	for _, p := range *b {
		var k int
		k, err = tc.Write(p)
		n += int64(k)
		if err != nil {
			break
		}
	}
	*b = nil
	if bc != nil {
		if ferr := bc.release(); err == nil {
			err = ferr
		}
	}
	return n, err
}

// batchWrite writes p through tc with the records gathered by bc.
func batchWrite(tc *tls.Conn, bc *batchConn, p []byte) (int, error) {
	if bc == nil {
		return tc.Write(p)
	}
	bc.arm()
	n, err := tc.Write(p)
	if ferr := bc.release(); err == nil {
		err = ferr
	}
	return n, err
}

// clientConn names the refusal when the server rejects this node's
// certificate: under TLS 1.3 the client's handshake is over before the
// server has checked it, so the server's alert arrives on the first read.
type clientConn struct {
	*tls.Conn
	addr string
	bc   *batchConn
}

func (c *clientConn) Write(p []byte) (int, error) { return batchWrite(c.Conn, c.bc, p) }

// Authenticated implements transport.Authenticator.
func (c *clientConn) Authenticated() bool { return true }

// WriteBuffers implements transport.BuffersWriter.
func (c *clientConn) WriteBuffers(b *net.Buffers) (int64, error) {
	return batchWriteBuffers(c.Conn, c.bc, b)
}

func (c *clientConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && strings.Contains(err.Error(), "remote error: tls:") {
		err = fmt.Errorf("%w: %s refused this node's certificate: %w", ErrPeerRefused, c.addr, err)
	}
	return n, err
}

// explain adds what an operator should check to the standard library's
// handshake errors.
func explain(err error) error {
	s := err.Error()
	switch {
	case strings.Contains(s, "didn't provide a certificate"), strings.Contains(s, "certificate required"):
		return fmt.Errorf("%w (the peer presented no client certificate: start it with --tls-dir)", err)
	case strings.Contains(s, "unknown authority"):
		return fmt.Errorf("%w (the peer's certificate is not signed by this cluster's CA)", err)
	case strings.Contains(s, "expired"):
		return fmt.Errorf("%w (the peer's certificate has expired: issue a new one)", err)
	case strings.Contains(s, "valid for"), strings.Contains(s, "doesn't contain any IP SANs"):
		return fmt.Errorf("%w (the server's certificate does not name the address dialled: issue it with that host in --hosts)", err)
	case strings.Contains(s, "remote error: tls: bad certificate"):
		return fmt.Errorf("%w (the peer did not accept this node's certificate, or the name it dialled is not in it)", err)
	case strings.Contains(s, "first record does not look like a TLS handshake"):
		return fmt.Errorf("%w (the peer does not speak TLS: start it with --tls-dir)", err)
	}
	return err
}

// answerPlainHTTP tells a plain-HTTP client (curl without https://, an
// old node) why it gets nothing, as net/http does for its own TLS servers.
func answerPlainHTTP(err error) {
	var re tls.RecordHeaderError
	if !errors.As(err, &re) || re.Conn == nil {
		return
	}
	switch string(re.RecordHeader[:]) {
	case "GET /", "POST ", "HEAD ", "PUT /", "DELET":
		re.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nThis Terrace node requires mutual TLS: use https:// and a client certificate of the cluster's CA (terrace commands: --tls-dir).\n")
	}
}

// tune sets what transport.NewConn sets on a bare TCP socket, which it
// cannot reach through the TLS connection, and reads and writes it as a
// Conn does, with raw system calls (transport.RawTCP).
func tune(nc net.Conn) net.Conn {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetReadBuffer(4 << 20)
		tc.SetWriteBuffer(4 << 20)
	}
	return transport.RawTCP(nc)
}
