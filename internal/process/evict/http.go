package evict

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultHTTPAddr is where HTTP listens when Addr is empty: loopback only,
// because anyone who can reach the endpoint can make the node drain.
const DefaultHTTPAddr = "127.0.0.1:0"

// maxHTTPBody bounds a POST /evict body.
const maxHTTPBody = 64 << 10

// shutdownWait bounds how long Watch waits for requests in flight when ctx
// ends; the handlers never block, so this is only a backstop.
const shutdownWait = time.Second

// HTTP is a notice delivered to a local endpoint, for drills, for agents
// that learn of an eviction some other way, and for operators:
//
//	POST /evict                          a notice without a deadline
//	POST /evict?in=30s                   a notice with deadline now+30s
//	POST /evict {"deadline": "2026-01-02T15:04:05Z", "detail": "drill"}
//	GET  /evict                          {"evicting": false} or the notice
//
// The first POST answers 202 with the notice; later ones answer 200 with
// that same notice and change nothing. A malformed request answers 400 and
// is not a notice. The server runs until ctx ends, so GET /evict keeps
// answering while the node drains.
type HTTP struct {
	// Addr is the address to listen on (default DefaultHTTPAddr); port 0
	// picks a free one.
	Addr string
	// OnListen, if set, is called with the bound address ("127.0.0.1:41234")
	// once the endpoint accepts connections, so that tests and the drill
	// harness can find a port chosen by the system.
	OnListen func(addr string)
}

// Watch implements Source. It returns an error if it cannot listen.
func (h HTTP) Watch(ctx context.Context, out chan<- Notice) error {
	addr := h.Addr
	if addr == "" {
		addr = DefaultHTTPAddr
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("evict: http: %w", err)
	}
	ep := &endpoint{got: make(chan Notice, 1)}
	srv := &http.Server{
		Handler:           ep.handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if h.OnListen != nil {
		h.OnListen(ln.Addr().String())
	}

	got := ep.got
	for {
		select {
		case n := <-got:
			got = nil // the endpoint hands over one notice only
			send(ctx, out, n)
		case err := <-served:
			// Serve returned without Shutdown: the listener broke.
			return fmt.Errorf("evict: http: serve: %w", err)
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
			if srv.Shutdown(sctx) != nil {
				srv.Close()
			}
			cancel()
			<-served // Serve returns ErrServerClosed as Shutdown begins
			return nil
		}
	}
}

// endpoint is the state behind /evict: the first notice posted.
type endpoint struct {
	got chan Notice // buffered 1; receives the first notice

	mu     sync.Mutex
	notice *Notice
}

// status is the JSON body of every /evict answer.
type status struct {
	Evicting bool   `json:"evicting"`
	Deadline string `json:"deadline,omitempty"` // RFC 3339; absent when the poster gave none
	Detail   string `json:"detail,omitempty"`
	Error    string `json:"error,omitempty"`
}

// postBody is the optional JSON body of POST /evict.
type postBody struct {
	Deadline string `json:"deadline"`
	Detail   string `json:"detail"`
}

var errBadPost = errors.New("bad request")

func (ep *endpoint) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /evict", func(w http.ResponseWriter, r *http.Request) {
		ep.mu.Lock()
		n := ep.notice
		ep.mu.Unlock()
		writeStatus(w, http.StatusOK, n, nil)
	})
	mux.HandleFunc("POST /evict", func(w http.ResponseWriter, r *http.Request) {
		n, err := parsePost(w, r)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, nil, err)
			return
		}
		ep.mu.Lock()
		code := http.StatusOK
		if ep.notice == nil {
			ep.notice = &n
			ep.got <- n // first and only send into a buffer of one
			code = http.StatusAccepted
		}
		n = *ep.notice
		ep.mu.Unlock()
		writeStatus(w, code, &n, nil)
	})
	return mux
}

// parsePost reads a POST /evict: an optional JSON body and an optional
// ?in= duration, not both carrying a deadline.
func parsePost(w http.ResponseWriter, r *http.Request) (Notice, error) {
	n := Notice{Source: "http", Detail: "POST /evict from " + r.RemoteAddr}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxHTTPBody))
	if err != nil {
		return n, fmt.Errorf("%w: reading body: %v", errBadPost, err)
	}
	if body = bytes.TrimSpace(body); len(body) > 0 {
		var pb postBody
		dec := json.NewDecoder(bytes.NewReader(body))
		// A misspelt field would otherwise silently drop a deadline.
		dec.DisallowUnknownFields()
		if err := dec.Decode(&pb); err != nil {
			return n, fmt.Errorf("%w: body: %v", errBadPost, err)
		}
		if pb.Deadline != "" {
			t, err := time.Parse(time.RFC3339, pb.Deadline)
			if err != nil {
				return n, fmt.Errorf("%w: deadline: %v", errBadPost, err)
			}
			n.Deadline = t
		}
		if pb.Detail != "" {
			n.Detail = pb.Detail
		}
	}
	if in := r.URL.Query().Get("in"); in != "" {
		if !n.Deadline.IsZero() {
			return n, fmt.Errorf("%w: give a deadline or ?in=, not both", errBadPost)
		}
		d, err := time.ParseDuration(in)
		if err != nil || d < 0 {
			return n, fmt.Errorf("%w: in=%q is not a duration >= 0", errBadPost, in)
		}
		n.Deadline = time.Now().Add(d)
	}
	return n, nil
}

func writeStatus(w http.ResponseWriter, code int, n *Notice, err error) {
	var st status
	if n != nil {
		st.Evicting = true
		st.Detail = n.Detail
		if !n.Deadline.IsZero() {
			st.Deadline = n.Deadline.Format(time.RFC3339Nano)
		}
	}
	if err != nil {
		st.Error = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(st)
}
