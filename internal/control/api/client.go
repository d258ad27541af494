package api

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/table"
)

// Dialer makes the client's connections (a transport.Network does).
type Dialer interface {
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// Client calls a coordinator over HTTP. Given several coordinator
// addresses, it goes to whichever answers (the leader), moving on when one
// is unreachable or no longer leads.
type Client struct {
	bases []string
	cur   atomic.Int32
	hc    *http.Client
	// beat sends heartbeats alone, on connections of their own: the
	// coordinator takes the close of the connection a worker's last
	// heartbeat came on as news of its death, and a connection that other
	// requests share closes when one of them is given up on.
	beat *http.Client
	// Token, when set, returns the bearer token sent with every request
	// (none if it returns ""): the join token of the role this node asks
	// for, read at each request so that a node follows its token file
	// (auth.NodeToken).
	Token func() string
	// RetryFor bounds how long a call keeps trying while no coordinator
	// answers (a failover in progress) before it fails.
	RetryFor time.Duration
	// Metrics, when set, is announced on joining as where this node
	// serves /metrics.
	Metrics string
	// Unreachable, when set, hears WaitReachable's failures at once and
	// then every few seconds, so that a node says why it waits.
	Unreachable func(addrs string, err error)
	// job is the job a worker joined (SetJob), sent with every request
	// (HeaderJob); -1 sends none.
	job atomic.Int64
}

// HeaderJob carries the job a worker joined with every request it
// makes: the coordinator refuses the requests of a worker of an earlier
// job (lease_lost), which would otherwise act for the next job's holder
// of its rank (docs/design/jobs.md).
const HeaderJob = "Terrace-Job"

// SetJob makes the client send job with every request; a worker calls
// it once it has joined (Layout.Job).
func (c *Client) SetJob(job uint64) { c.job.Store(int64(job)) }

// Current is the coordinator the client asks first, the one that last
// answered: of several, the leader once one has ("" without any).
func (c *Client) Current() string {
	if len(c.bases) == 0 {
		return ""
	}
	return c.bases[int(c.cur.Load())%len(c.bases)]
}

// NewClient returns a client for the coordinators at addrs, a
// comma-separated list of host:port or URLs, dialled with d (TCP if nil).
func NewClient(addrs string, d Dialer) *Client {
	c := &Client{hc: &http.Client{Timeout: PollWait + 10*time.Second}, RetryFor: 30 * time.Second}
	c.job.Store(-1)
	scheme := "http://"
	if d != nil {
		dial := func(ctx context.Context, _, addr string) (net.Conn, error) { return d.Dial(ctx, addr) }
		c.hc.Transport = &http.Transport{DialContext: dial}
		// A dialer whose connections are TLS already (tlsnet's) serves
		// https: URLs and messages then say so.
		if _, ok := d.(interface{ ClientTLS() *tls.Config }); ok {
			c.hc.Transport = &http.Transport{DialTLSContext: dial}
			scheme = "https://"
		}
	}
	c.beat = &http.Client{Timeout: c.hc.Timeout, Transport: http.DefaultTransport.(*http.Transport).Clone()}
	if c.hc.Transport != nil {
		c.beat.Transport = c.hc.Transport.(*http.Transport).Clone()
	}
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if !strings.Contains(a, "://") {
			a = scheme + a
		}
		c.bases = append(c.bases, strings.TrimRight(a, "/"))
	}
	return c
}

// ErrBadAddress is a client's error for a coordinator address no request
// can be made to.
var ErrBadAddress = errors.New("not a coordinator address")

// CheckAddrs reports whether addrs, NewClient's comma-separated list,
// names at least one coordinator, each an address or a URL a request can
// be made to.
func CheckAddrs(addrs string) error {
	n := 0
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		n++
		u := a
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		p, err := url.Parse(u)
		if err != nil {
			return fmt.Errorf("%s: %w (%w)", a, ErrBadAddress, err)
		}
		if p.Host == "" {
			return fmt.Errorf("%s: %w (no host)", a, ErrBadAddress)
		}
		// A bare host was dialled on port 80 ("connection refused"); a
		// URL says its port by its scheme.
		if p.Port() == "" && u != a {
			return fmt.Errorf("%s: %w (no port: HOST:PORT, the coordinator's --listen)", a, ErrBadAddress)
		}
	}
	if n == 0 {
		return fmt.Errorf("%w: none given", ErrBadAddress)
	}
	return nil
}

// Error is a coordinator's refusal; it unwraps to the sentinel of its
// code.
type Error struct {
	Coordinator string
	Route       string
	Code        Code
	Msg         string
}

func (e *Error) Error() string {
	return fmt.Sprintf("coordinator %s: %s: %s (%s)", e.Coordinator, e.Route, e.Msg, e.Code)
}

func (e *Error) Unwrap() error { return e.Code.Err() }

// maxBackoff bounds the wait between rounds of tries of every coordinator
// address (a round of refused loopback dials costs microseconds).
const maxBackoff = 200 * time.Millisecond

// errTransient marks failures another coordinator (or a moment) may
// cure (transientError Is it).
var errTransient = errors.New("transient")

// transientError is a failure another coordinator (or a moment) may cure.
// Its message is the failure's alone: "transient:" in the message a user
// read once the retries ran out ("coordinator unreachable: transient:
// coordinator ...") named the client's bookkeeping, not the problem.
type transientError struct{ error }

func (e transientError) Unwrap() error        { return e.error }
func (e transientError) Is(target error) bool { return target == errTransient }

// do sends the request to the coordinator that answered last, moving on
// to the next on transient failures, with backoff once all were tried,
// for at most RetryFor. The backoff stops growing at maxBackoff: a
// failover takes seconds, and a client that waited a second between
// rounds found the new leader up to a second after it listened.
func (c *Client) do(ctx context.Context, route, query string, in, out any) error {
	if len(c.bases) == 0 {
		return fmt.Errorf("%w: no coordinator address", ErrBadRequest)
	}
	deadline := time.Now().Add(c.RetryFor)
	backoff := 50 * time.Millisecond
	for {
		i := int(c.cur.Load()) % len(c.bases)
		err := c.doOne(ctx, c.bases[i], route, query, in, out)
		if err == nil || !errors.Is(err, errTransient) || ctx.Err() != nil {
			return err
		}
		c.cur.CompareAndSwap(int32(i), int32((i+1)%len(c.bases)))
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if (i+1)%len(c.bases) == 0 {
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

func (c *Client) doOne(ctx context.Context, base, route, query string, in, out any) error {
	method, path, _ := strings.Cut(route, " ")
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path+query, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != nil {
		if tok := c.Token(); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	if j := c.job.Load(); j >= 0 {
		req.Header.Set(HeaderJob, strconv.FormatInt(j, 10))
	}
	hc := c.hc
	if route == RouteHeartbeat {
		hc = c.beat
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("coordinator %s: %w", base, err)
		}
		return transientError{fmt.Errorf("coordinator %s: %v", base, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return transientError{fmt.Errorf("coordinator %s: %v", base, err)}
	}
	if resp.StatusCode != http.StatusOK {
		return replyError(base, route, resp, b)
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = b
		return nil
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// replyError decodes a refusal. A reply without a code is not a
// coordinator's: a proxy's, a coordinator's that died mid-reply, or
// another server's that took a dead coordinator's port (a node's
// /metrics listener on an ephemeral port, as a test saw). Another
// coordinator, or a moment, may answer, so it is transient: the client
// moves on and, past RetryFor, fails naming the status.
func replyError(base, route string, resp *http.Response, body []byte) error {
	var r ErrorReply
	if err := json.Unmarshal(body, &r); err != nil || r.Code == "" {
		// A short text says why (a TLS listener's to plain HTTP does).
		why := ""
		if t := strings.TrimSpace(string(body)); t != "" && len(t) < 256 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			why = ": " + t
		}
		return transientError{fmt.Errorf("coordinator %s: %s: %s (not a coordinator's reply)%s", base, route, resp.Status, why)}
	}
	err := &Error{Coordinator: base, Route: route, Code: r.Code, Msg: r.Error}
	if r.Code.Transient() {
		return transientError{err}
	}
	return err
}

// WaitReachable polls the coordinators' health route until one answers
// or ctx ends, so that a node started before its coordinator waits a
// bounded time and then fails with a clear message. A round in which
// every coordinator's TLS disagrees with this client's (tlsMismatch)
// fails at once with ErrTLSMismatch: no wait cures a certificate of
// another CA or a missing --tls-dir, and a node that retried for its
// whole join timeout looked hung while it filled the coordinator's log
// with refusals ten times a second.
func (c *Client) WaitReachable(ctx context.Context) error {
	if len(c.bases) == 0 {
		return fmt.Errorf("%w: no coordinator address", ErrBadRequest)
	}
	_, path, _ := strings.Cut(RouteHealth, " ")
	var last error
	var noticed time.Time
	try := healthTimeout
	mismatched := 0 // consecutive tries that met a TLS mismatch
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			// The caller's time ran out while this waited (the select
			// below may take the poll when both are ready): the tries
			// before say why. A try begun now was said to find a
			// coordinator that "accepts connections but does not
			// answer" (no answer within 0s), one that had refused
			// every connection for 30 s.
			return fmt.Errorf("%w: %s: %w", ErrUnavailable, strings.Join(c.bases, ","), cmp.Or(last, err))
		}
		base := c.bases[i%len(c.bases)]
		// A coordinator that accepts and never answers (stopped, or
		// wedged) held each try for the client's whole timeout (40 s),
		// past any caller's budget, with nothing said. A try that runs
		// out doubles the next one's time: a slow coordinator (a loaded
		// host, a TLS handshake) is still reached.
		tctx, cancel := context.WithTimeout(ctx, try)
		req, err := http.NewRequestWithContext(tctx, "GET", base+path, nil)
		if err != nil {
			cancel()
			return fmt.Errorf("%w: %w", ErrBadAddress, err) // a nil request panicked in Do
		}
		start := time.Now()
		resp, err := c.hc.Do(req)
		if err != nil && ctx.Err() != nil {
			// The caller's time ran out, not the try's: a coordinator
			// that answers in a millisecond was said to accept
			// connections and not answer under checkpoint --timeout 1ms.
			cancel()
			return fmt.Errorf("%w: %s: the time given ran out after %v, before an answer: %w", ErrUnavailable, base, time.Since(start).Round(time.Millisecond), ctx.Err())
		}
		if err != nil && tctx.Err() != nil {
			err = fmt.Errorf("no answer within %v (it accepts connections but does not answer: stopped, or overloaded?)", time.Since(start).Round(100*time.Millisecond))
			try = min(2*try, c.hc.Timeout)
		}
		mismatch := err != nil && tlsMismatch(err)
		if err == nil {
			// The body says why, when a proxy or a TLS listener answered.
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				c.cur.Store(int32(i % len(c.bases)))
				return nil
			}
			err = fmt.Errorf("health check: %s: %s", resp.Status, strings.TrimSpace(string(b)))
			// The health route takes no input: a 400 is the listener
			// refusing the request's form, plain HTTP to a TLS port.
			mismatch = resp.StatusCode == http.StatusBadRequest
		}
		cancel()
		last = err
		if mismatched++; !mismatch {
			mismatched = 0
		}
		if mismatched >= len(c.bases) {
			return fmt.Errorf("%w: %s: %w", ErrTLSMismatch, base, err)
		}
		if (i+1)%len(c.bases) != 0 {
			continue // the next coordinator of the round, at once
		}
		// Only a round that every coordinator failed is said: a standby
		// listed first refuses connections while the leader after it
		// answers, and every node of a replicated coordinator warned
		// that its coordinator was unreachable as it joined.
		if c.Unreachable != nil && time.Since(noticed) >= reachableNotice {
			noticed = time.Now()
			c.Unreachable(strings.Join(c.bases, ","), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: %v", ErrUnavailable, strings.Join(c.bases, ","), last)
		case <-time.After(reachablePoll):
		}
	}
}

// tlsMismatch reports whether err is a handshake that only an operator
// can mend: a peer certificate this client cannot verify (another CA's,
// expired, or not naming the address dialled), a peer that does not
// speak TLS, or the peer's alert refusing this client's certificate.
func tlsMismatch(err error) bool {
	var verify *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	var op *net.OpError
	return errors.As(err, &verify) || errors.As(err, &record) || (errors.As(err, &op) && op.Op == "remote error")
}

// reachablePoll is WaitReachable's interval between rounds of every
// coordinator (each tried at once after the last); reachableNotice how often
// Unreachable hears of a coordinator that still does not answer;
// healthTimeout bounds one try (the health route answers at once).
const reachablePoll, reachableNotice, healthTimeout = 100 * time.Millisecond, 5 * time.Second, 2 * time.Second

// Layout returns the first layout whose version is above after, waiting
// until there is one or ctx ends.
func (c *Client) Layout(ctx context.Context, after uint64) (*layout.Layout, error) {
	for {
		var l layout.Layout
		if err := c.do(ctx, RouteLayout, fmt.Sprintf("?after=%d", after), nil, &l); err != nil {
			return nil, err
		}
		if l.Version > after {
			return &l, nil
		}
	}
}

// CreateTable adds spec, or checks that an identical table exists, and
// returns a layout that holds it.
func (c *Client) CreateTable(ctx context.Context, spec table.Spec) (*layout.Layout, error) {
	var l layout.Layout
	return &l, c.do(ctx, RouteTables, "", spec, &l)
}

// JoinServer admits server id at addr, incarnation inc (may be empty).
func (c *Client) JoinServer(ctx context.Context, id, addr, inc string) (*layout.Layout, error) {
	var r Joined
	return r.Layout, c.do(ctx, RouteJoin, "", Join{Role: RoleServer, ID: id, Addr: addr, Incarnation: inc, Metrics: c.Metrics}, &r)
}

// JoinAs admits the node j describes (a server or a worker, with its
// machine and class), and returns the coordinator's answer. Like
// JoinServer and JoinWorker, it announces the client's Metrics address
// when j names none.
func (c *Client) JoinAs(ctx context.Context, j Join) (Joined, error) {
	if j.Metrics == "" {
		j.Metrics = c.Metrics
	}
	var r Joined
	return r, c.do(ctx, RouteJoin, "", j, &r)
}

// JoinWorker admits worker id, incarnation inc (may be empty), and
// returns its rank: the same again when a worker of that ID joins again.
func (c *Client) JoinWorker(ctx context.Context, id, inc string) (int, error) {
	var r Joined
	return r.Rank, c.do(ctx, RouteJoin, "", Join{Role: RoleWorker, ID: id, Incarnation: inc, Metrics: c.Metrics}, &r)
}

// Report sends a worker's final report.
func (c *Client) Report(ctx context.Context, rank int, report any) error {
	return c.do(ctx, RouteReport, fmt.Sprintf("?rank=%d", rank), report, nil)
}

// Reports fetches the reports received so far, by rank.
func (c *Client) Reports(ctx context.Context) (map[int]json.RawMessage, error) {
	var m map[int]json.RawMessage
	return m, c.do(ctx, RouteReports, "", nil, &m)
}

// RequestCheckpoint asks for a cluster checkpoint at the next pass
// boundary, or with now inside the pass in progress (at once either way
// when the job is done), and returns its sequence number: Status's
// Checkpoint follows it to its commit.
func (c *Client) RequestCheckpoint(ctx context.Context, now bool) (uint64, error) {
	var t CheckpointTicket
	query := ""
	if now {
		query = "?now=true"
	}
	return t.Seq, c.do(ctx, RouteCheckpoint, query, nil, &t)
}

// CheckpointTicket answers a checkpoint request: Seq is the checkpoint
// that will serve it.
type CheckpointTicket struct {
	Seq uint64 `json:"seq"`
}
