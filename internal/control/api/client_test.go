package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/table"
)

// TestCodesRoundTrip: every sentinel the coordinator returns reaches the
// client as itself, through its code only: the messages here say nothing
// a substring match could find.
func TestCodesRoundTrip(t *testing.T) {
	for _, c := range codes {
		t.Run(string(c.code), func(t *testing.T) {
			if got := CodeOf(fmt.Errorf("wrapped: %w", c.err)); got != c.code {
				t.Fatalf("CodeOf(%v) = %s", c.err, got)
			}
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.code.Status())
				json.NewEncoder(w).Encode(ErrorReply{Code: c.code, Error: "refused"})
			}))
			defer hs.Close()
			cl := NewClient(hs.URL, nil)
			cl.RetryFor = 0
			_, err := cl.Progress(context.Background(), Update{})
			if !errors.Is(err, c.err) {
				t.Fatalf("client error %v does not wrap %v", err, c.err)
			}
			if transient := errors.Is(err, ErrUnavailable); transient != c.code.Transient() {
				t.Fatalf("client error %v: transient %v, want %v", err, transient, c.code.Transient())
			}
		})
	}
	if CodeOf(errors.New("other")) != CodeInternal || CodeInternal.Err() != nil {
		t.Fatal("an unknown error has a sentinel")
	}
	if CodeOf(fmt.Errorf("%w: %w", ErrNotPersisted, ErrNotLeader)) != CodeNotLeader {
		t.Fatal("the most specific code does not win")
	}
	if CodeOf(fmt.Errorf("bad: %w", table.ErrInvalid)) != CodeInvalidTable {
		t.Fatal("table.ErrInvalid has no code of its own")
	}
}

// TestMovesToTheLeader: a replica that answers "not the leader" is left
// for the next address.
func TestMovesToTheLeader(t *testing.T) {
	deposed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(CodeNotLeader.Status())
		json.NewEncoder(w).Encode(ErrorReply{Code: CodeNotLeader, Error: "deposed"})
	}))
	defer deposed.Close()
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(Joined{Rank: 3})
	}))
	defer leader.Close()
	cl := NewClient(strings.Join([]string{deposed.URL, leader.URL}, ","), nil)
	rank, err := cl.JoinWorker(context.Background(), "w", "")
	if err != nil || rank != 3 {
		t.Fatalf("join: rank %d, %v", rank, err)
	}
}

// TestStrangerOnACoordinatorsPort: a dead coordinator's port taken by
// another HTTP server (a node's /metrics, answering 404 in plain text) is
// passed over for the next coordinator, not taken for a refusal.
func TestStrangerOnACoordinatorsPort(t *testing.T) {
	stranger := httptest.NewServer(http.NotFoundHandler())
	defer stranger.Close()
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(Joined{Rank: 2})
	}))
	defer leader.Close()
	cl := NewClient(strings.Join([]string{stranger.URL, leader.URL}, ","), nil)
	if rank, err := cl.JoinWorker(context.Background(), "w", ""); err != nil || rank != 2 {
		t.Fatalf("join: rank %d, %v", rank, err)
	}
	alone := NewClient(stranger.URL, nil)
	alone.RetryFor = 50 * time.Millisecond
	if _, err := alone.JoinWorker(context.Background(), "w", ""); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "404") || strings.Contains(err.Error(), "transient") {
		t.Fatalf("only a stranger: %v, want %v naming the 404, and no bookkeeping word", err, ErrUnavailable)
	}
}

// TestUnreachable: a closed port is unreachable, and said to refuse, not
// to be silent: a try begun as the caller's time ran out (or after) was
// said to find a coordinator that "accepts connections but does not
// answer" (no answer within 0s).
func TestUnreachable(t *testing.T) {
	cl := NewClient("127.0.0.1:1", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := cl.WaitReachable(ctx); !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("reaching a closed port: %v", err)
	}
	if err := cl.WaitReachable(ctx); !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("reaching a closed port once the time is out: %v", err)
	}
}

// TestReachOutOfTime: a caller whose time runs out during a try is told
// so (context.DeadlineExceeded), not that the coordinator "accepts
// connections but does not answer": checkpoint --timeout 1ms said that
// of a live coordinator.
func TestReachOutOfTime(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer slow.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond) // under healthTimeout
	defer cancel()
	err := NewClient(slow.URL, nil).WaitReachable(ctx)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("WaitReachable with the caller's time out mid-try: %v", err)
	}
}

// TestReachableStandbyFirst: a leader listed after a standby (which
// listens on no port) is reached without a word; every node of a
// replicated coordinator, given the README's list, warned at its start
// that the coordinator was unreachable.
func TestReachableStandbyFirst(t *testing.T) {
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer leader.Close()
	cl := NewClient("127.0.0.1:1,"+strings.TrimPrefix(leader.URL, "http://"), nil)
	cl.Unreachable = func(addrs string, err error) { t.Errorf("said unreachable (%s): %v", addrs, err) }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.WaitReachable(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cl.Current(); got != leader.URL {
		t.Errorf("the client asks %s first, want the leader %s", got, leader.URL)
	}
}

// TestUnreachableSilent: a coordinator that accepts connections and never
// answers (SIGSTOPped) is said to be so after one bounded try, while the
// caller's budget still runs; each try used to last the HTTP client's
// whole timeout, so nothing was said until the budget was spent.
func TestUnreachableSilent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	cl := NewClient(ln.Addr().String(), nil)
	heard := make(chan error, 10)
	cl.Unreachable = func(_ string, err error) {
		select {
		case heard <- err:
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cl.WaitReachable(ctx) }()
	select {
	case err := <-heard:
		if !strings.Contains(err.Error(), "no answer within") {
			t.Errorf("the notice says %q, want it to say the coordinator does not answer", err)
		}
	case err := <-done:
		t.Fatalf("WaitReachable returned %v before any notice", err)
	}
	cancel() // the caller gives up
	if err := <-done; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("WaitReachable: %v, want %v", err, ErrUnavailable)
	}
}

// tlsDialer dials TLS with cfg; its ClientTLS method makes the client
// speak https through it, as it does through tlsnet, whose wrapping of
// handshake errors it copies.
type tlsDialer struct{ cfg *tls.Config }

func (d tlsDialer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&tls.Dialer{Config: d.cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tls: handshake with peer failed %s: %w", addr, err)
	}
	return c, nil
}

func (d tlsDialer) ClientTLS() *tls.Config { return d.cfg }

// TestTLSMismatchFailsAtOnce: a node whose TLS disagrees with the
// coordinator's (no --tls-dir against a TLS coordinator, a certificate of
// another CA, TLS against a plain one) fails at once with ErrTLSMismatch,
// not after its whole join timeout; a mismatched coordinator beside one
// that answers is passed over.
func TestTLSMismatchFailsAtOnce(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	secure := httptest.NewTLSServer(ok)
	defer secure.Close()
	plain := httptest.NewServer(ok)
	defer plain.Close()
	strange := tlsDialer{&tls.Config{RootCAs: x509.NewCertPool()}} // trusts no CA
	trusting := tlsDialer{secure.Client().Transport.(*http.Transport).TLSClientConfig}
	host := func(s *httptest.Server) string {
		return strings.TrimPrefix(strings.TrimPrefix(s.URL, "https://"), "http://")
	}
	for _, c := range []struct {
		name  string
		addrs string
		d     Dialer
	}{
		{"plain to TLS", host(secure), nil},
		{"another CA", host(secure), strange},
		{"TLS to plain", host(plain), trusting},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := NewClient(c.addrs, c.d).WaitReachable(ctx); !errors.Is(err, ErrTLSMismatch) {
				t.Fatalf("WaitReachable: %v, want %v", err, ErrTLSMismatch)
			}
		})
	}
	if err := NewClient(host(plain)+","+host(secure), trusting).WaitReachable(context.Background()); err != nil {
		t.Fatalf("a mismatched coordinator beside a good one: %v", err)
	}
}

// TestBadAddress: an address no request can be made to is named by
// CheckAddrs, and WaitReachable returns ErrBadAddress for it; it
// panicked on the nil request.
func TestBadAddress(t *testing.T) {
	for _, a := range []string{"127.0.0.1:127.0.0.1", "h:1,127.0.0.1:x", "http://", " , ", "localhost", "h0:7070,h1"} { // the last two were dialled on port 80
		if err := CheckAddrs(a); !errors.Is(err, ErrBadAddress) {
			t.Errorf("CheckAddrs(%q): %v, want ErrBadAddress", a, err)
		}
	}
	for _, a := range []string{"127.0.0.1:7070", "h0:7070,h1:7070", "https://coord.example:443"} {
		if err := CheckAddrs(a); err != nil {
			t.Errorf("CheckAddrs(%q): %v", a, err)
		}
	}
	if err := NewClient("127.0.0.1:127.0.0.1", nil).WaitReachable(t.Context()); !errors.Is(err, ErrBadAddress) {
		t.Fatalf("WaitReachable: %v, want ErrBadAddress", err)
	}
}

// TestTokenAtEachRequest: the client asks for its token at every request,
// heartbeats (on their own connections) included, so that a node whose
// token file changed presents the new token from its next request on.
func TestTokenAtEachRequest(t *testing.T) {
	got := make(chan string, 4)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.Write([]byte("{}"))
	}))
	defer hs.Close()
	c := NewClient(hs.URL, nil)
	tok := "first-token-0123456789"
	c.Token = func() string { return tok }
	if err := c.Heartbeat(t.Context(), 0, 0); err != nil {
		t.Fatal(err)
	}
	tok = "second-token-0123456789"
	if err := c.Leave(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Heartbeat(t.Context(), 0, 0); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"Bearer first-token-0123456789", "Bearer second-token-0123456789", "Bearer second-token-0123456789"} {
		if h := <-got; h != want {
			t.Errorf("request %d: Authorization %q, want %q", i, h, want)
		}
	}
}

// TestHeartbeatsOnTheirOwnConnections: heartbeats never share a
// connection with other requests, whose give-up closes it: the
// coordinator takes the close of a worker's heartbeat connection as news
// of its death.
func TestHeartbeatsOnTheirOwnConnections(t *testing.T) {
	from := map[string]map[string]bool{} // path -> remote addresses
	var mu sync.Mutex
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if from[r.URL.Path] == nil {
			from[r.URL.Path] = map[string]bool{}
		}
		from[r.URL.Path][r.RemoteAddr] = true
		mu.Unlock()
		w.Write([]byte("{}"))
	}))
	defer hs.Close()
	c := NewClient(hs.URL, nil)
	for range 3 {
		if err := c.Leave(t.Context(), 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Heartbeat(t.Context(), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for a := range from["/v1/heartbeat"] {
		if from["/v1/leave"][a] {
			t.Errorf("a heartbeat and another request shared connection %s", a)
		}
	}
}
