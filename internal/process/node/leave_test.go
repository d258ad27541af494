package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/process/evict"
)

// TestLeaveRingCoordinatorGone: after the job, a server refused as the
// last one (another drains to it) whose coordinator then stops answering
// leaves without a handoff, as one that found it gone at once does. It
// asked again for the client's whole retry budget (30 s), then exited 1
// ("drain: coordinator unreachable").
func TestLeaveRingCoordinatorGone(t *testing.T) {
	var asked atomic.Int32
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) > 1 { // the coordinator is gone after its first answer
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
			return
		}
		w.WriteHeader(http.StatusConflict)
		json.NewEncoder(w).Encode(api.ErrorReply{Code: api.CodeLastServer, Error: "s0 drains to you"})
	}))
	defer srv.Close()
	cc := api.NewClient(srv.URL, nil)
	cc.RetryFor = 10 * time.Second // longer than afterJobReach: the budget is not what ends it
	var end jobEnd
	end.done.Store(true)
	cfg := ServerConfig{ID: "s1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	_, err := leaveRing(t.Context(), cc, cfg, evict.Notice{Source: "signal", Deadline: time.Now().Add(time.Minute)}, &end)
	if !errors.Is(err, errCoordinatorGone) {
		t.Fatalf("leaveRing with the coordinator gone after the job: %v, want %v", err, errCoordinatorGone)
	}
}

// TestDrainNoTablesCoordinatorGone: a server SIGTERMed before its job's
// first table, its coordinator gone, holds nothing and leaves (exit 0);
// it waited the client's 30 s retry budget, then exited 1 ("drain:
// coordinator unreachable").
func TestDrainNoTablesCoordinatorGone(t *testing.T) {
	cc := api.NewClient("127.0.0.1:1", nil)
	cc.RetryFor = 10 * time.Second
	var end jobEnd
	end.noTables.Store(true)
	cfg := ServerConfig{ID: "s0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	err := drainServer(t.Context(), cc, nil, cfg, evict.Notice{Source: "signal", Deadline: time.Now().Add(time.Minute)}, &end)
	if !errors.Is(err, ErrDrained) {
		t.Fatalf("drain with no table and no coordinator: %v, want %v", err, ErrDrained)
	}
}

// TestDrainDuringJobSaysCoordinatorGone: a server draining during the job
// whose coordinator does not answer says that it waits for it. It waited
// silent for its grace (30 s), then exited 1.
func TestDrainDuringJobSaysCoordinatorGone(t *testing.T) {
	cc := api.NewClient("127.0.0.1:1", nil)
	cc.RetryFor = 3 * drainReach // the drain asks for longer than the warning waits
	var log syncBuffer
	cfg := ServerConfig{ID: "s0", Logger: slog.New(slog.NewTextHandler(&log, nil))}
	if err := drainServer(t.Context(), cc, nil, cfg, evict.Notice{Source: "signal", Deadline: time.Now().Add(time.Minute)}, &jobEnd{}); err == nil {
		t.Fatal("a drain during the job with no coordinator succeeded")
	}
	if !strings.Contains(log.String(), "the coordinator does not answer: waiting for it") {
		t.Fatalf("the server's log said nothing of the coordinator:\n%s", log.String())
	}
}

// syncBuffer is a bytes.Buffer that goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
