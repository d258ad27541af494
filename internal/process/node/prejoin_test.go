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
	"sync"
	"testing"
	"time"

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
