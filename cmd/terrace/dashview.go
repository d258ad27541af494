package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
)

// A dashboard view is the coordinator's dashboard on a listener of its
// own, plain HTTP and read-only (--dashboard-listen): under mutual TLS a
// browser would need a client certificate of the cluster's CA to open the
// API's dashboard, and an operator usually has none. It answers GET only,
// and only the dashboard and the three read routes its page calls, so
// that nothing it serves can change the cluster; it listens on loopback
// unless told otherwise (reach it through an SSH tunnel), and warns when
// it does not.

// dashViewRoutes are the API routes the dashboard's page reads.
var dashViewRoutes = []string{api.RouteStatus, api.RouteEvents, api.RouteHistory}

// dashView serves the leading coordinator's dashboard, read-only.
type dashView struct {
	mu sync.Mutex
	h  http.Handler // the current term's API; nil until this replica leads
}

// lead points the view at c, the coordinator of this replica's new term,
// or at nothing (nil) once the term ends: the old term's API refused
// every read ("state not persisted").
func (d *dashView) lead(c *coord.Coordinator) {
	var h http.Handler
	if c != nil {
		h = c.Handler()
	}
	d.mu.Lock()
	d.h = h
	d.mu.Unlock()
}

func (d *dashView) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the dashboard view is read-only", http.StatusMethodNotAllowed)
		return
	}
	if !dashViewAllows(r.URL.Path) {
		http.Error(w, "not part of the dashboard view (the API is on the coordinator's --listen address)", http.StatusNotFound)
		return
	}
	d.mu.Lock()
	h := d.h
	d.mu.Unlock()
	if h == nil {
		http.Error(w, "this coordinator does not lead (yet): open the leader's dashboard", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// dashViewAllows reports whether path is the dashboard's page, one of
// its files, or a route its page reads.
func dashViewAllows(path string) bool {
	if path == "/" || strings.HasPrefix(path, "/dash/") {
		return true
	}
	for _, route := range dashViewRoutes {
		if _, p, _ := strings.Cut(route, " "); p == path {
			return true
		}
	}
	return false
}

// serveDashView serves d on addr until ctx ends, and reports the address
// it listens on; a non-loopback address is served with a warning.
func serveDashView(ctx context.Context, addr string, d *dashView, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--dashboard-listen %s: %w", addr, err)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		log.Warn("the dashboard view listens beyond loopback without TLS or tokens: whoever reaches it reads the cluster's status and events",
			"addr", ln.Addr().String())
	}
	hs := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
		IdleTimeout: 2 * api.PollWait, MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	})
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("dashboard view stopped", "err", err)
		}
	}()
	return ln.Addr().String(), nil
}
