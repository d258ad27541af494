package evict

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// manual sends its notice when fire is closed and reports when Watch has
// returned by closing returned.
type manual struct {
	notice   Notice
	fire     chan struct{}
	returned chan struct{}
}

func newManual(n Notice) *manual {
	return &manual{notice: n, fire: make(chan struct{}), returned: make(chan struct{})}
}

func (m *manual) Watch(ctx context.Context, out chan<- Notice) error {
	defer close(m.returned)
	select {
	case <-m.fire:
		send(ctx, out, m.notice)
	case <-ctx.Done():
		return nil
	}
	<-ctx.Done()
	return nil
}

// tracked wraps a Source and closes returned when its Watch returns.
type tracked struct {
	Source
	returned chan struct{}
}

func (s tracked) Watch(ctx context.Context, out chan<- Notice) error {
	defer close(s.returned)
	return s.Source.Watch(ctx, out)
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("%s did not return", what)
	}
}

// receive reads one value from ch, failing after wait.
func receive(t *testing.T, ch <-chan Notice) (Notice, bool) {
	t.Helper()
	select {
	case n, ok := <-ch:
		return n, ok
	case <-time.After(wait):
		t.Fatal("nothing from Merge's channel")
	}
	return Notice{}, false
}

func TestMergeFirstWinsAndCloses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := newManual(Notice{Source: "a"})
	b := newManual(Notice{Source: "b", Deadline: time.Now().Add(time.Hour)})
	const grace = 45 * time.Second
	ch := Merge(ctx, grace, a, b)

	close(a.fire)
	got := time.Now()
	n, ok := receive(t, ch)
	if !ok || n.Source != "a" {
		t.Fatalf("first = %+v, %v; want a's notice", n, ok)
	}
	near(t, "deadline filled by Merge", n.Deadline, got.Add(grace), time.Second)
	if _, ok := receive(t, ch); ok {
		t.Fatal("channel not closed after the first notice")
	}
	// b's later notice goes nowhere, and does not block b.
	close(b.fire)
	if closed(a.returned) || closed(b.returned) {
		t.Fatal("a source stopped before ctx ended")
	}
	cancel()
	waitClosed(t, "a", a.returned)
	waitClosed(t, "b", b.returned)
}

func TestMergeKeepsSourceDeadline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	want := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := newManual(Notice{Source: "a", Deadline: want})
	close(a.fire)
	n, ok := receive(t, Merge(ctx, time.Minute, a))
	if !ok || !n.Deadline.Equal(want) {
		t.Fatalf("notice %+v, %v; want the source's deadline %v", n, ok, want)
	}
}

func TestMergeNoSources(t *testing.T) {
	if n, ok := receive(t, Merge(context.Background(), time.Second)); ok {
		t.Fatalf("notice %+v from no sources", n)
	}
}

func TestMergeReportsFatalErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var errs []error
	ch := MergeWithErrors(ctx, time.Second, func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}, HTTP{Addr: ln.Addr().String()}, File{})
	// Both sources fail, so the channel closes without ctx ending.
	if n, ok := receive(t, ch); ok {
		t.Fatalf("notice %+v from failing sources", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 2 {
		t.Fatalf("reported %v, want two errors", errs)
	}
}

// TestMergeCancelStopsEverything runs every kind of source, none of which
// gives a notice, and checks that cancelling returns every Watch, closes
// the channel, and leaves no goroutine behind.
func TestMergeCancelStopsEverything(t *testing.T) {
	aws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			fmt.Fprint(w, "tok")
			return
		}
		http.NotFound(w, r)
	}))
	gcp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "FALSE")
	}))
	defer aws.Close()
	defer gcp.Close()
	before := runtime.NumGoroutine()

	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	var ts []tracked
	for _, s := range []Source{
		File{Path: filepath.Join(t.TempDir(), "evict"), Poll: 5 * time.Millisecond},
		HTTP{OnListen: func(a string) { addrs <- a }},
		AWS{BaseURL: aws.URL, Poll: 5 * time.Millisecond},
		GCP{BaseURL: gcp.URL, Poll: 5 * time.Millisecond},
		Signal{Signals: []os.Signal{syscall.SIGUSR2}},
	} {
		ts = append(ts, tracked{Source: s, returned: make(chan struct{})})
	}
	ch := Merge(ctx, time.Second, ts[0], ts[1], ts[2], ts[3], ts[4])
	select {
	case <-addrs: // HTTP is up; let the pollers poll a few times
	case <-time.After(wait):
		t.Fatal("HTTP source did not listen")
	}
	select {
	case n := <-ch:
		t.Fatalf("notice %+v with nothing to notice", n)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if n, ok := receive(t, ch); ok {
		t.Fatalf("notice %+v after cancel", n)
	}
	for i, s := range ts {
		if !closed(s.returned) {
			t.Fatalf("channel closed before source %d (%T) returned", i, s.Source)
		}
	}

	// Connections the metadata clients closed take a moment to end on the
	// servers' side; poll until the count is back.
	aws.Close()
	gcp.Close()
	deadline := time.Now().Add(wait)
	for {
		now := runtime.NumGoroutine()
		if now <= before {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before Merge:\n%s", now, before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond) // a poll interval, with a deadline
	}
}
