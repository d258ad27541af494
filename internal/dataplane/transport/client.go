package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// ErrConnLost is wrapped by the error every outstanding call gets when its
// connection breaks.
var ErrConnLost = errors.New("transport: connection lost")

// ReplyFunc handles the reply to one request on the client's reader
// goroutine. It must consume the payload: read it with r.Payload(h) or
// r.ReadPayloadInto(h, dst). A non-nil error breaks the connection (the
// stream can no longer be trusted).
type ReplyFunc func(h wire.Header, r *wire.Reader) error

// Call is an outstanding request.
type Call struct {
	OnReply ReplyFunc
	// OnFail runs instead of OnReply when the request cannot complete.
	OnFail func(err error)
}

// Client is a connection on which requests are matched to replies.
type Client struct {
	*Conn
	addr    string
	nextID  atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]*Call
	failed  error
}

// DialOptions configure Dial.
type DialOptions struct {
	Hello      wire.Hello
	MaxPayload int
	// DialTimeout bounds connecting; the context may cut it shorter.
	DialTimeout time.Duration
	// Network makes the connection (TCP if nil).
	Network Network
}

// Dial connects to addr and introduces the client with a hello frame.
func Dial(ctx context.Context, addr string, o DialOptions) (*Client, error) {
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	nc, err := OrTCP(o.Network).Dial(dctx, addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c := &Client{Conn: NewConn(nc, o.MaxPayload), addr: addr, pending: make(map[uint64]*Call)}
	c.Send(Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.THello}, wire.AppendHello(nil, o.Hello))})
	go c.readLoop()
	return c, nil
}

// Addr is the address the client dialled.
func (c *Client) Addr() string { return c.addr }

// NextID returns a fresh request id.
func (c *Client) NextID() uint64 { return c.nextID.Add(1) }

// Call sends a frame whose header carries h.ReqID and registers call for
// its reply. done, when set, runs once the frame is written (see Outgoing).
func (c *Client) Call(f *wire.Frame, reqID uint64, call *Call, done func(error)) error {
	c.mu.Lock()
	if c.failed != nil {
		// Broken between the caller's check and now: the call fails as
		// any outstanding one did, so that every call ends in exactly one
		// of OnReply and OnFail.
		err := c.failed
		c.mu.Unlock()
		if done != nil {
			done(err)
		}
		if call.OnFail != nil {
			call.OnFail(err)
		}
		return err
	}
	c.pending[reqID] = call
	c.mu.Unlock()
	return c.Send(Outgoing{Frame: f, Done: func(err error) {
		if done != nil {
			done(err)
		}
		if err != nil {
			c.failCall(reqID, err)
		}
	}})
}

// Ping asks the server at the other end who it is: it returns the ID its
// reply names ("" from a server that names none) and the configuration
// epoch it answers with (0 until a coordinator has given it a layout).
// Another process may answer at a server's address once it is gone (a
// port given to a new server): the coordinator's failure detector and a
// worker's client tell it by the ID.
func (c *Client) Ping(ctx context.Context) (server string, epoch uint64, err error) {
	type pong struct {
		who   string
		epoch uint64
		err   error
	}
	done := make(chan pong, 1)
	req := c.NextID()
	c.Call(wire.NewFrame(wire.Header{Type: wire.TPing, ReqID: req}), req, &Call{
		OnReply: func(h wire.Header, r *wire.Reader) error {
			p, err := r.Payload(h)
			if err != nil {
				done <- pong{err: err}
				return err
			}
			who, err := wire.ParsePingReply(p)
			done <- pong{who, h.Epoch, err}
			return nil
		},
		OnFail: func(err error) { done <- pong{err: err} },
	}, nil)
	select {
	case p := <-done:
		return p.who, p.epoch, p.err
	case <-c.Done():
		return "", 0, ErrConnLost
	case <-ctx.Done():
		c.Forget(req)
		return "", 0, ctx.Err()
	}
}

// Forget drops a pending call whose caller gave up; a late reply is then
// read and discarded.
func (c *Client) Forget(reqID uint64) {
	c.mu.Lock()
	delete(c.pending, reqID)
	c.mu.Unlock()
}

func (c *Client) failCall(reqID uint64, err error) {
	c.mu.Lock()
	call := c.pending[reqID]
	delete(c.pending, reqID)
	c.mu.Unlock()
	if call != nil && call.OnFail != nil {
		call.OnFail(err)
	}
}

func (c *Client) readLoop() {
	err := c.readReplies()
	err = fmt.Errorf("%w: %s: %v", ErrConnLost, c.addr, err)
	c.fail(err)
	c.mu.Lock()
	c.failed = err
	p := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, call := range p {
		if call.OnFail != nil {
			call.OnFail(err)
		}
	}
}

func (c *Client) readReplies() error {
	for {
		h, err := c.Reader.Next()
		if err != nil {
			return err
		}
		c.mu.Lock()
		call := c.pending[h.ReqID]
		delete(c.pending, h.ReqID)
		c.mu.Unlock()
		if call == nil {
			if err := c.Reader.Discard(h); err != nil {
				return err
			}
			continue
		}
		if err := call.OnReply(h, c.Reader); err != nil {
			if call.OnFail != nil {
				call.OnFail(err)
			}
			return err
		}
	}
}
