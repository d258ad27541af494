package coord

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/table"
)

// Handler serves the coordinator's HTTP API (api's routes): each handler
// decodes a request, steps the machine through the driver, and encodes
// the reply or the error's code.
func (c *Coordinator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(api.RouteLayout, c.serveLayout)
	handle(mux, api.RouteJoin, c.join)
	handle(mux, api.RouteTables, func(ctx context.Context, spec table.Spec) (any, error) {
		r, err := c.call(ctx, func(m *Machine, id uint64) { m.CreateTable(id, spec) })
		return r.Layout, err
	})
	mux.HandleFunc(api.RouteReport, c.serveReport)
	mux.HandleFunc(api.RouteReports, func(w http.ResponseWriter, r *http.Request) { reply(w, c.Reports(), nil) })
	mux.HandleFunc(api.RouteHealth, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	handle(mux, api.RouteHeartbeat, func(ctx context.Context, b api.Beat) (any, error) {
		if err := c.Heartbeat(b.Rank, b.Clock); err != nil {
			return nil, err
		}
		if bc, ok := ctx.Value(beatConnKey{}).(*beatConn); ok {
			bc.rank.Store(int64(b.Rank))
			c.beatConns.Store(b.Rank, bc)
		}
		return struct{}{}, nil
	})
	handle(mux, api.RouteLeave, func(ctx context.Context, r api.Rank) (any, error) {
		_, err := c.call(ctx, func(m *Machine, id uint64) { m.Leave(id, r.Rank) })
		return struct{}{}, err
	})
	c.workHandlers(mux)
	c.serverHandlers(mux)
	c.stageHandlers(mux)
	c.observeHandlers(mux)
	c.jobHandlers(mux)
	served := c.metrics.instrument(mux, mux)
	// A coordinator that could not save a change has lost its leadership:
	// it answers nothing more, so that clients go to the new leader.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		err := c.failed
		c.mu.Unlock()
		if err != nil {
			reply(w, nil, err)
			return
		}
		if err := c.checkJob(r); err != nil {
			reply(w, nil, err)
			return
		}
		served.ServeHTTP(w, r)
	})
}

// checkJob refuses a request that names a job other than the one the
// cluster runs (api.HeaderJob): a worker of an earlier job, declared dead
// but still running, whose rank the next job gave out again.
func (c *Coordinator) checkJob(r *http.Request) error {
	h := r.Header.Get(api.HeaderJob)
	if h == "" {
		return nil
	}
	job, err := strconv.ParseUint(h, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q", api.ErrBadRequest, api.HeaderJob, h)
	}
	c.mu.Lock()
	known, cur := c.published != nil, uint64(0)
	if known {
		cur = c.published.Job
	}
	c.mu.Unlock()
	if known && job != cur {
		return fmt.Errorf("%w: this worker joined job %d; the cluster runs job %d", api.ErrLeaseLost, job+1, cur+1)
	}
	return nil
}

func (c *Coordinator) workHandlers(mux *http.ServeMux) {
	handle(mux, api.RouteAcquire, func(ctx context.Context, a api.Acquire) (any, error) {
		ctx, cancel := context.WithTimeout(ctx, api.PollWait)
		defer cancel()
		r, err := c.call(ctx, func(m *Machine, id uint64) { m.Acquire(id, a) })
		if errors.Is(err, context.DeadlineExceeded) {
			return api.Grant{Partition: -1, End: api.ToEnd}, nil // nothing yet; the client asks again
		}
		return r.Grant, err
	})
	// Room for two state blobs of api.MaxStateBytes, base64-encoded.
	handleUpTo(mux, api.RouteProgress, api.MaxStateBytes/3*8+1<<20, c.progress)
	handle(mux, api.RouteSplit, func(ctx context.Context, s api.Split) (any, error) {
		r, err := c.call(ctx, func(m *Machine, id uint64) { m.Split(id, s) })
		return r.Grant, err
	})
	mux.HandleFunc(api.RouteState, c.serveState)
}

func (c *Coordinator) serverHandlers(mux *http.ServeMux) {
	handle(mux, api.RouteServerLeave, func(ctx context.Context, j api.Join) (any, error) {
		r, err := c.call(ctx, func(m *Machine, id uint64) {
			if j.Notice != nil {
				j.Notice.Role, j.Notice.ID = api.RoleServer, j.ID
			}
			m.noteNotice(j.Notice)
			m.LeaveServer(id, j.ID)
		})
		return r.Layout, err
	})
	handle(mux, api.RouteSynced, func(ctx context.Context, s api.Synced) (any, error) {
		_, err := c.call(ctx, func(m *Machine, id uint64) { m.Synced(id, s) })
		return struct{}{}, err
	})
	handle(mux, api.RouteRebuilt, func(ctx context.Context, r api.Rebuilt) (any, error) {
		_, err := c.call(ctx, func(m *Machine, id uint64) { m.Rebuilt(id, r) })
		return struct{}{}, err
	})
	handle(mux, api.RouteCheckpointed, func(ctx context.Context, ck api.Checkpointed) (any, error) {
		_, err := c.call(ctx, func(m *Machine, id uint64) { m.Checkpointed(id, ck) })
		return struct{}{}, err
	})
	handle(mux, api.RouteRestored, func(ctx context.Context, ck api.Checkpointed) (any, error) {
		_, err := c.call(ctx, func(m *Machine, id uint64) { m.Restored(id, ck) })
		return struct{}{}, err
	})
	mux.HandleFunc(api.RouteCheckpoint, func(w http.ResponseWriter, r *http.Request) {
		now, err := strconv.ParseBool(cmp.Or(r.URL.Query().Get("now"), "false"))
		if err != nil {
			reply(w, nil, fmt.Errorf("%w: now=%q: %v", api.ErrBadRequest, r.URL.Query().Get("now"), err))
			return
		}
		rep, err := c.call(r.Context(), func(m *Machine, id uint64) { m.RequestCheckpoint(id, now) })
		reply(w, api.CheckpointTicket{Seq: rep.Seq}, err)
	})
}

func (c *Coordinator) join(ctx context.Context, j api.Join) (any, error) {
	r, err := c.call(ctx, func(m *Machine, id uint64) { m.Join(id, j) })
	return api.Joined{Rank: r.Rank, Layout: r.Layout}, err
}

// serveLayout answers a long-poll for a layout newer than ?after, with the
// current one after api.PollWait.
func (c *Coordinator) serveLayout(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	ctx, cancel := context.WithTimeout(r.Context(), api.PollWait)
	defer cancel()
	l, err := c.Layout(ctx, after)
	if errors.Is(err, context.DeadlineExceeded) {
		l, err = c.current(), nil
	}
	reply(w, l, err)
}

func (c *Coordinator) serveReport(w http.ResponseWriter, r *http.Request) {
	rank, err := strconv.Atoi(r.URL.Query().Get("rank"))
	if err != nil {
		reply(w, nil, fmt.Errorf("%w: rank: %v", api.ErrBadRequest, err))
		return
	}
	var raw json.RawMessage
	if err := decode(w, r, &raw, api.MaxReportBytes); err != nil {
		reply(w, nil, err)
		return
	}
	_, err = c.call(r.Context(), func(m *Machine, id uint64) { m.Report(id, rank, raw) })
	reply(w, struct{}{}, err)
}

func (c *Coordinator) serveState(w http.ResponseWriter, r *http.Request) {
	p, perr := strconv.Atoi(r.URL.Query().Get("partition"))
	ver, verr := strconv.ParseUint(r.URL.Query().Get("version"), 10, 64)
	if err := errors.Join(perr, verr); err != nil {
		reply(w, nil, fmt.Errorf("%w: %v", api.ErrBadRequest, err))
		return
	}
	blob, err := c.State(r.Context(), p, ver)
	if err != nil {
		reply(w, nil, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(blob)
}

// handle serves route with f, which takes the decoded JSON body.
func handle[Req any, Resp any](mux *http.ServeMux, route string, f func(context.Context, Req) (Resp, error)) {
	handleUpTo(mux, route, 1<<20, f)
}

// handleUpTo is handle for bodies of at most n bytes.
func handleUpTo[Req any, Resp any](mux *http.ServeMux, route string, n int64, f func(context.Context, Req) (Resp, error)) {
	mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := decode(w, r, &req, n); err != nil {
			reply(w, nil, err)
			return
		}
		resp, err := f(r.Context(), req)
		reply(w, resp, err)
	})
}

// decode decodes a request body of at most n bytes. A longer one is
// refused as such: cut off, it read as "unexpected EOF", which named no
// cause.
func decode(w http.ResponseWriter, r *http.Request, v any, n int64) error {
	d := json.NewDecoder(http.MaxBytesReader(w, r.Body, n))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			return fmt.Errorf("%w: %s: body over %d bytes", api.ErrBadRequest, r.URL.Path, n)
		}
		return fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	return nil
}

// reply writes v, or err with its code.
func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := api.CodeOf(err)
		w.WriteHeader(code.Status())
		json.NewEncoder(w).Encode(api.ErrorReply{Code: code, Error: err.Error()})
		return
	}
	json.NewEncoder(w).Encode(v)
}

// Serve runs the coordinator on ln until ctx ends: the driver (Run), the
// servers' failure detector (Monitor) and the HTTP API.
func (c *Coordinator) Serve(ctx context.Context, ln net.Listener, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	h := c.Handler()
	if c.opts.Wrap != nil {
		h = c.opts.Wrap(h, c.NoteRefused)
	}
	// A client that trickles its request is cut off: headers within 10 s,
	// the whole body within ReadTimeout. Replies are not bounded, since a
	// long-poll holds one for api.PollWait.
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
		IdleTimeout: 2 * api.PollWait, MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnContext: c.tagConn, ConnState: c.connState}
	var bg sync.WaitGroup
	defer bg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bg.Go(func() { c.Run(ctx) })
	bg.Go(func() { c.Monitor(ctx, log) })
	stop := context.AfterFunc(ctx, func() {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer scancel()
		hs.Shutdown(sctx)
	})
	defer stop()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("coordinator: %w", err)
	}
	return nil
}

// beatConn is a connection of the HTTP API: the rank whose heartbeat it
// carried last (-1: none), so that its close is news of that worker
// (Machine.HeartbeatConnClosed).
type beatConn struct{ rank atomic.Int64 }

type beatConnKey struct{}

// tagConn gives every accepted connection its beatConn, which its
// requests' contexts carry.
func (c *Coordinator) tagConn(ctx context.Context, nc net.Conn) context.Context {
	bc := &beatConn{}
	bc.rank.Store(-1)
	c.conns.Store(nc, bc)
	return context.WithValue(ctx, beatConnKey{}, bc)
}

// connState tells the machine of the close of the connection a worker's
// last heartbeat came on (an earlier one's close is no news).
func (c *Coordinator) connState(nc net.Conn, s http.ConnState) {
	if s != http.StateClosed && s != http.StateHijacked {
		return
	}
	v, ok := c.conns.LoadAndDelete(nc)
	if !ok {
		return
	}
	bc := v.(*beatConn)
	r := int(bc.rank.Load())
	if r >= 0 && c.beatConns.CompareAndDelete(r, bc) {
		c.HeartbeatConnClosed(r)
	}
}
