package coord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/table"
)

// pollWait is how long a layout long-poll is held open before the
// coordinator answers with the unchanged layout.
const pollWait = 20 * time.Second

type joinRequest struct {
	Role        string `json:"role"`
	ID          string `json:"id"`
	Addr        string `json:"addr,omitempty"`
	Incarnation string `json:"incarnation,omitempty"`
}

type joinReply struct {
	Rank   int            `json:"rank"`
	Layout *layout.Layout `json:"layout,omitempty"`
}

// Handler serves the coordinator's HTTP API (and the internal calls of
// servers and workers: joins, leases, reports):
//
//	POST /v1/checkpoint       take a checkpoint at the next epoch boundary
//
//	GET  /v1/layout?after=V   long-poll for a layout newer than version V
//	POST /v1/join             {"role":"server"|"worker","id":..,"addr":..}
//	POST /v1/tables           a table.Spec
//	POST /v1/report?rank=R    a worker's final report (any JSON)
//	POST /v1/work/acquire     lease a data partition ({"rank","epoch"})
//	POST /v1/work/progress    an Update; answers the partition's state version
//	GET  /v1/work/state?partition=P&version=V   a partition's state blob
//	GET  /v1/reports          the reports received
//	GET  /healthz
func (c *Coordinator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/layout", func(w http.ResponseWriter, r *http.Request) {
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		ctx, cancel := context.WithTimeout(r.Context(), pollWait)
		defer cancel()
		l, err := c.Layout(ctx, after)
		if errors.Is(err, context.DeadlineExceeded) {
			c.mu.Lock()
			l, err = c.snapshot(), nil
			c.mu.Unlock()
		}
		reply(w, l, err)
	})
	mux.HandleFunc("POST /v1/join", func(w http.ResponseWriter, r *http.Request) {
		var req joinRequest
		if err := decode(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		switch req.Role {
		case RoleServer:
			l, err := c.JoinServerAs(req.ID, req.Addr, req.Incarnation)
			reply(w, joinReply{Layout: l}, err)
		case RoleWorker:
			rank, err := c.JoinWorkerAs(req.ID, req.Incarnation)
			reply(w, joinReply{Rank: rank}, err)
		default:
			reply(w, nil, fmt.Errorf("%w: unknown role %q", errBadRequest, req.Role))
		}
	})
	mux.HandleFunc("POST /v1/tables", func(w http.ResponseWriter, r *http.Request) {
		var spec table.Spec
		if err := decode(r, &spec); err != nil {
			reply(w, nil, err)
			return
		}
		l, err := c.CreateTable(r.Context(), spec)
		reply(w, l, err)
	})
	mux.HandleFunc("POST /v1/report", func(w http.ResponseWriter, r *http.Request) {
		rank, err := strconv.Atoi(r.URL.Query().Get("rank"))
		var raw json.RawMessage
		if err == nil {
			err = decode(r, &raw)
		}
		if err == nil {
			err = c.Report(rank, raw)
		}
		reply(w, struct{}{}, err)
	})
	mux.HandleFunc("GET /v1/reports", func(w http.ResponseWriter, r *http.Request) {
		reply(w, c.Reports(), nil)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	c.workHandlers(mux)
	// A coordinator that could not save a change has lost its leadership:
	// it answers nothing more, so that clients go to the new leader.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		err := c.persistErr
		c.mu.Unlock()
		if err != nil {
			reply(w, nil, err)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

var errBadRequest = errors.New("coord: bad request")

func decode(r *http.Request, v any) error { return decodeUpTo(r, v, 1<<20) }

// decodeUpTo decodes a request body of at most n bytes.
func decodeUpTo(r *http.Request, v any, n int64) error {
	d := json.NewDecoder(io.LimitReader(r.Body, n))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return nil
}

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, errBadRequest), errors.Is(err, table.ErrInvalid), errors.Is(err, ErrStateTooLarge):
			code = http.StatusBadRequest
		case errors.Is(err, ErrNoState):
			code = http.StatusNotFound
		case errors.Is(err, ErrNotPersisted):
			code = http.StatusServiceUnavailable
		case errors.Is(err, ErrFull), errors.Is(err, ErrTableConflict), errors.Is(err, ErrLeaseLost):
			code = http.StatusConflict
		}
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	json.NewEncoder(w).Encode(v)
}

// Client talks to a coordinator over HTTP. It implements ps.Control.
// Given several coordinator addresses, it goes to whichever answers (the
// leader), moving on when one is unreachable or no longer leads.
type Client struct {
	bases []string
	cur   atomic.Int32
	base  string // for messages
	hc    *http.Client
	// RetryFor bounds how long a call keeps trying while no coordinator
	// answers (a failover in progress) before it fails.
	RetryFor time.Duration
}

// NewClient returns a client for the coordinators at addrs, a
// comma-separated list of host:port or URLs, over TCP.
func NewClient(addrs string) *Client { return NewClientOn(nil, addrs) }

// NewClientOn is NewClient over network n (TCP, through net/http's default
// transport, if nil).
func NewClientOn(n transport.Network, addrs string) *Client {
	c := &Client{hc: &http.Client{Timeout: pollWait + 10*time.Second}, RetryFor: 30 * time.Second}
	if n != nil {
		c.hc.Transport = &http.Transport{
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return n.Dial(ctx, addr) },
		}
	}
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if !strings.Contains(a, "://") {
			a = "http://" + a
		}
		c.bases = append(c.bases, strings.TrimRight(a, "/"))
	}
	c.base = strings.Join(c.bases, ",")
	return c
}

// errTransient marks failures another coordinator (or a moment) may cure.
var errTransient = errors.New("coordinator unavailable")

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	deadline := time.Now().Add(c.RetryFor)
	backoff := 50 * time.Millisecond
	for {
		i := int(c.cur.Load()) % max(1, len(c.bases))
		err := c.doOne(ctx, c.bases[i], method, path, in, out)
		if err == nil || !errors.Is(err, errTransient) || ctx.Err() != nil {
			return err
		}
		c.cur.CompareAndSwap(int32(i), int32((i+1)%len(c.bases)))
		if time.Now().After(deadline) {
			return err
		}
		if (i+1)%len(c.bases) == 0 {
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return err
			}
			backoff = min(2*backoff, time.Second)
		}
	}
}

func (c *Client) doOne(ctx context.Context, base, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("coordinator %s: %w", base, err)
		}
		return fmt.Errorf("%w: %s: %v", errTransient, base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errTransient, base, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		json.Unmarshal(b, &e)
		err := fmt.Errorf("coordinator %s: %s %s: %s: %s", base, method, path, resp.Status, e.Error)
		if resp.StatusCode == http.StatusServiceUnavailable {
			return fmt.Errorf("%w: %v", errTransient, err)
		}
		if resp.StatusCode == http.StatusNotFound && strings.Contains(e.Error, "no such partition state") {
			return fmt.Errorf("%w (%v)", ErrNoState, err)
		}
		if resp.StatusCode == http.StatusConflict {
			switch {
			case strings.Contains(e.Error, "lease lost"):
				err = fmt.Errorf("%w (%v)", ErrLeaseLost, err)
			case strings.Contains(e.Error, "table"):
				err = fmt.Errorf("%w (%v)", ErrTableConflict, err)
			default:
				err = fmt.Errorf("%w (%v)", ErrFull, err)
			}
		}
		return err
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

// Layout implements ps.Control.
func (c *Client) Layout(ctx context.Context, after uint64) (*layout.Layout, error) {
	for {
		var l layout.Layout
		if err := c.do(ctx, "GET", fmt.Sprintf("/v1/layout?after=%d", after), nil, &l); err != nil {
			return nil, err
		}
		if l.Version > after {
			return &l, nil
		}
	}
}

// CreateTable implements ps.Control.
func (c *Client) CreateTable(ctx context.Context, spec table.Spec) (*layout.Layout, error) {
	var l layout.Layout
	return &l, c.do(ctx, "POST", "/v1/tables", spec, &l)
}

// JoinServer admits a server.
func (c *Client) JoinServer(ctx context.Context, id, addr string) (*layout.Layout, error) {
	return c.JoinServerAs(ctx, id, addr, "")
}

// JoinServerAs admits incarnation inc of a server (see
// Coordinator.MemberGone).
func (c *Client) JoinServerAs(ctx context.Context, id, addr, inc string) (*layout.Layout, error) {
	var r joinReply
	return r.Layout, c.do(ctx, "POST", "/v1/join", joinRequest{Role: RoleServer, ID: id, Addr: addr, Incarnation: inc}, &r)
}

// JoinWorker admits a worker and returns its rank.
func (c *Client) JoinWorker(ctx context.Context, id string) (int, error) {
	return c.JoinWorkerAs(ctx, id, "")
}

// JoinWorkerAs admits incarnation inc of a worker and returns its rank.
func (c *Client) JoinWorkerAs(ctx context.Context, id, inc string) (int, error) {
	var r joinReply
	return r.Rank, c.do(ctx, "POST", "/v1/join", joinRequest{Role: RoleWorker, ID: id, Incarnation: inc}, &r)
}

// Report sends a worker's final report.
func (c *Client) Report(ctx context.Context, rank int, report any) error {
	return c.do(ctx, "POST", fmt.Sprintf("/v1/report?rank=%d", rank), report, nil)
}

// Reports fetches the reports received so far.
func (c *Client) Reports(ctx context.Context) (map[int]json.RawMessage, error) {
	var m map[int]json.RawMessage
	return m, c.do(ctx, "GET", "/v1/reports", nil, &m)
}

// WaitReachable polls the coordinator's health endpoint until it answers
// or ctx ends, so that a node started before its coordinator waits a
// bounded time and then fails with a clear message.
func (c *Client) WaitReachable(ctx context.Context) error {
	var last error
	for i := 0; ; i++ {
		req, _ := http.NewRequestWithContext(ctx, "GET", c.bases[i%len(c.bases)]+"/healthz", nil)
		resp, err := c.hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.cur.Store(int32(i % len(c.bases)))
				return nil
			}
			err = fmt.Errorf("health check: %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("coordinator %s unreachable: %v", c.base, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

type workRequest struct {
	Rank      int   `json:"rank"`
	Epoch     int   `json:"epoch"`
	Partition int   `json:"partition"`
	Offset    int   `json:"offset"`
	Clock     int64 `json:"clock"`
	Complete  bool  `json:"complete"`
}

func (c *Coordinator) workHandlers(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/work/acquire", func(w http.ResponseWriter, r *http.Request) {
		var req workRequest
		if err := decode(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), pollWait)
		defer cancel()
		g, err := c.Acquire(ctx, req.Rank, req.Epoch)
		if errors.Is(err, context.DeadlineExceeded) {
			g, err = Grant{Partition: -1}, nil // nothing yet; the client asks again
		}
		reply(w, g, err)
	})
	mux.HandleFunc("POST /v1/work/progress", func(w http.ResponseWriter, r *http.Request) {
		var u Update
		// Room for a state blob of MaxStateBytes, base64-encoded.
		if err := decodeUpTo(r, &u, MaxStateBytes/3*4+1<<20); err != nil {
			reply(w, nil, err)
			return
		}
		ver, err := c.Progress(r.Context(), u)
		reply(w, progressReply{State: ver}, err)
	})
	mux.HandleFunc("GET /v1/work/state", func(w http.ResponseWriter, r *http.Request) {
		p, perr := strconv.Atoi(r.URL.Query().Get("partition"))
		ver, verr := strconv.ParseUint(r.URL.Query().Get("version"), 10, 64)
		if err := errors.Join(perr, verr); err != nil {
			reply(w, nil, fmt.Errorf("%w: %v", errBadRequest, err))
			return
		}
		blob, err := c.State(r.Context(), p, ver)
		if err != nil {
			reply(w, nil, err)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(blob)
	})
	mux.HandleFunc("POST /v1/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		var req workRequest
		if err := decode(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, struct{}{}, c.Heartbeat(req.Rank))
	})
	mux.HandleFunc("POST /v1/servers/leave", func(w http.ResponseWriter, r *http.Request) {
		var req joinRequest
		if err := decode(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		if !c.LeaveServer(req.ID) {
			reply(w, nil, fmt.Errorf("%w: server %s is not on the ring, or is the last one", errBadRequest, req.ID))
			return
		}
		c.mu.Lock()
		l := c.snapshot()
		c.mu.Unlock()
		reply(w, l, nil)
	})
	mux.HandleFunc("POST /v1/servers/synced", func(w http.ResponseWriter, r *http.Request) {
		var req syncedRequest
		if err := decode(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		c.Synced(req.From, req.Joiner, req.Version)
		reply(w, struct{}{}, nil)
	})
	mux.HandleFunc("POST /v1/checkpoint", func(w http.ResponseWriter, r *http.Request) {
		reply(w, struct{}{}, c.RequestCheckpoint())
	})
	mux.HandleFunc("POST /v1/servers/checkpointed", func(w http.ResponseWriter, r *http.Request) {
		var req ckptReport
		if err := decode(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, struct{}{}, c.Checkpointed(req.From, req.Seq, req.Error))
	})
	mux.HandleFunc("POST /v1/servers/restored", func(w http.ResponseWriter, r *http.Request) {
		var req ckptReport
		if err := decode(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, struct{}{}, c.Restored(req.From, req.Seq, req.Error))
	})
	mux.HandleFunc("POST /v1/leave", func(w http.ResponseWriter, r *http.Request) {
		var req workRequest
		if err := decode(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		c.ReleaseWorker(req.Rank)
		reply(w, struct{}{}, nil)
	})
}

// Acquire asks for a partition of epoch e to train (see Coordinator.Acquire).
func (c *Client) Acquire(ctx context.Context, rank, epoch int) (Grant, error) {
	for {
		var g Grant
		if err := c.do(ctx, "POST", "/v1/work/acquire", workRequest{Rank: rank, Epoch: epoch}, &g); err != nil {
			return Grant{}, err
		}
		if g.Done || g.Partition >= 0 {
			return g, nil
		}
	}
}

type progressReply struct {
	State uint64 `json:"state"`
}

// Progress reports training progress on a leased partition, and returns
// the partition's state version after it (see Coordinator.Progress).
func (c *Client) Progress(ctx context.Context, u Update) (uint64, error) {
	var r progressReply
	err := c.do(ctx, "POST", "/v1/work/progress", u, &r)
	return r.State, err
}

// State fetches version ver of partition p's worker state.
func (c *Client) State(ctx context.Context, p int, ver uint64) ([]byte, error) {
	var blob []byte
	return blob, c.do(ctx, "GET", fmt.Sprintf("/v1/work/state?partition=%d&version=%d", p, ver), nil, &blob)
}

// Heartbeat keeps a worker's leases alive.
func (c *Client) Heartbeat(ctx context.Context, rank int) error {
	return c.do(ctx, "POST", "/v1/heartbeat", workRequest{Rank: rank}, nil)
}

// Leave ends a worker's membership (a drained departure).
func (c *Client) Leave(ctx context.Context, rank int) error {
	return c.do(ctx, "POST", "/v1/leave", workRequest{Rank: rank}, nil)
}

// LeaveServer starts a server's drained departure (see
// Coordinator.LeaveServer) and returns the layout that lists it leaving.
func (c *Client) LeaveServer(ctx context.Context, id string) (*layout.Layout, error) {
	var l layout.Layout
	return &l, c.do(ctx, "POST", "/v1/servers/leave", joinRequest{Role: "server", ID: id}, &l)
}

type syncedRequest struct {
	From    string `json:"from"`
	Joiner  string `json:"joiner"`
	Version uint64 `json:"version"`
}

// Synced reports that server from has shipped joiner its copies.
func (c *Client) Synced(ctx context.Context, from, joiner string, version uint64) error {
	return c.do(ctx, "POST", "/v1/servers/synced", syncedRequest{From: from, Joiner: joiner, Version: version}, nil)
}

type ckptReport struct {
	From  string `json:"from"`
	Seq   uint64 `json:"seq"`
	Error string `json:"error,omitempty"`
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Checkpointed reports that server from wrote its part of checkpoint seq (err nil) or could not.
func (c *Client) Checkpointed(ctx context.Context, from string, seq uint64, err error) error {
	return c.do(ctx, "POST", "/v1/servers/checkpointed", ckptReport{From: from, Seq: seq, Error: errText(err)}, nil)
}

// Restored reports that server from loaded its slots of checkpoint seq (err nil) or could not.
func (c *Client) Restored(ctx context.Context, from string, seq uint64, err error) error {
	return c.do(ctx, "POST", "/v1/servers/restored", ckptReport{From: from, Seq: seq, Error: errText(err)}, nil)
}

// Serve runs the coordinator's HTTP API on ln, and its failure detectors,
// until ctx ends.
func (c *Coordinator) Serve(ctx context.Context, ln net.Listener, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	hs := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go c.Monitor(ctx, log)
	go c.WatchWorkers(ctx)
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	})
	defer stop()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("coordinator: %w", err)
	}
	return nil
}
