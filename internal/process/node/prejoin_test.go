package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/process/evict"
	"github.com/terrace-ml/terrace/ps"
)

// TestBeforeJoin: a notice while joining ends the join's context with
// errNoticeBeforeJoin and is handed on to the drain; without one, the
// drain reads the notices themselves.
func TestBeforeJoin(t *testing.T) {
	notices := make(chan evict.Notice, 1)
	jctx, joined := beforeJoin(t.Context(), notices)
	notices <- evict.Notice{Source: "signal"}
	<-jctx.Done()
	if !noticedBeforeJoin(jctx) {
		t.Fatalf("cause %v, want %v", context.Cause(jctx), errNoticeBeforeJoin)
	}
	if n := <-joined(); n.Source != "signal" {
		t.Fatalf("the notice handed on: %+v", n)
	}

	quiet := make(chan evict.Notice)
	jctx, joined = beforeJoin(t.Context(), quiet)
	if got := joined(); got != (<-chan evict.Notice)(quiet) || jctx.Err() != nil {
		t.Fatalf("without a notice: notices %v (want the same channel), context %v", got, jctx.Err())
	}
}

// TestNoticeWhileClusterForms: a worker that joined a coordinator still
// waiting for its servers takes SIGTERM's notice at once and ends
// drained. It used to read notices only once connected, so it ignored
// them until its join timeout and then failed.
func TestNoticeWhileClusterForms(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	addr := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- RunCoordinator(ctx, CoordinatorConfig{Listen: "127.0.0.1:0", Logger: log,
			Options: coord.Options{Servers: 2, Workers: 1, Replication: 2},
			Ready:   func(_ *coord.Coordinator, a string) { addr <- a }})
	}()
	// The worker asks for the layout only once joined: the first such
	// request is its wait for the cluster to form.
	waiting := make(chan struct{})
	var once sync.Once
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: <-addr})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/layout" {
			once.Do(func() { close(waiting) })
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	notices := make(chan evict.Notice, 1)
	ran := make(chan error, 1)
	go func() {
		// A join timeout far past the test's: only the notice ends the wait.
		_, err := RunWorker(ctx, WorkerConfig{ID: "w0", Coordinator: front.Listener.Addr().String(), Logger: log,
			JoinTimeout: time.Hour, Notices: notices},
			func(context.Context, *ps.Client) (any, error) { return nil, errors.New("trained without servers") })
		ran <- err
	}()
	select {
	case <-waiting:
	case err := <-ran:
		t.Fatalf("the worker ended before it waited for the layout: %v", err)
	}
	notices <- evict.Notice{Source: "signal", Deadline: time.Now().Add(time.Hour)}
	if err := <-ran; !errors.Is(err, ErrDrained) {
		t.Fatalf("worker ended with %v, want %v", err, ErrDrained)
	}
	cancel()
	<-served
}

// TestReplacementWhileClusterForms: a worker started while the forming
// cluster already counts every worker it expects (one of them dead: it
// was SIGKILLed while it waited for servers, and nothing finds that
// before the cluster forms) waits and joins as one more once the servers
// have joined. It exited at once on "full".
func TestReplacementWhileClusterForms(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	addr := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- RunCoordinator(ctx, CoordinatorConfig{Listen: "127.0.0.1:0", Logger: log,
			Options: coord.Options{Servers: 1, Workers: 1, Replication: 1},
			Ready:   func(_ *coord.Coordinator, a string) { addr <- a }})
	}()
	coordAddr := <-addr
	// The dead worker: joined, and never heard of again.
	if _, err := api.NewClient(coordAddr, nil).JoinWorker(ctx, "dead", "i0"); err != nil {
		t.Fatal(err)
	}
	// Its replacement, refused as one too many: it asks again, and its
	// warning says so, while no server has joined.
	refused := make(chan struct{})
	var once sync.Once
	wlog := slog.New(handlerFunc(func(r slog.Record) {
		if strings.Contains(r.Message, "every worker it expects") {
			once.Do(func() { close(refused) })
		}
	}))
	ran := make(chan error, 1)
	go func() {
		_, err := RunWorker(ctx, WorkerConfig{ID: "w1", Coordinator: coordAddr, Logger: wlog, JoinTimeout: time.Minute},
			func(context.Context, *ps.Client) (any, error) { return nil, nil })
		ran <- err
	}()
	select {
	case <-refused:
	case err := <-ran:
		t.Fatalf("the replacement ended before the cluster formed: %v", err)
	}
	go RunServer(ctx, ServerConfig{ID: "s0", Listen: "127.0.0.1:0", Coordinator: coordAddr, Logger: log})
	if err := <-ran; err != nil {
		t.Fatalf("the replacement, once the cluster formed: %v", err)
	}
	cancel()
	<-served
}

// handlerFunc is a slog.Handler that hands every record to f.
type handlerFunc func(slog.Record)

func (h handlerFunc) Enabled(context.Context, slog.Level) bool      { return true }
func (h handlerFunc) Handle(_ context.Context, r slog.Record) error { h(r); return nil }
func (h handlerFunc) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h handlerFunc) WithGroup(string) slog.Handler                 { return h }
