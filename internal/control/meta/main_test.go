package meta

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// shared is one embedded member that most tests use, each under its own
// prefix.
var (
	shared        *Embedded
	sharedDir     string
	sharedStarted time.Duration
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "meta-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	start := time.Now()
	sharedDir = dir
	shared, err = StartEmbedded(ctx, EmbedConfig{Name: "shared", Dir: dir})
	sharedStarted = time.Since(start)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	shared.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	prefixMu sync.Mutex
	prefixes = map[*testing.T]string{}
	runs     int
)

// testPrefix is the test's own prefix: the same for every Store the test
// opens, and new for every run of it (-count).
func testPrefix(t *testing.T) string {
	prefixMu.Lock()
	defer prefixMu.Unlock()
	p, ok := prefixes[t]
	if !ok {
		runs++
		p = fmt.Sprintf("/test/%s/%d", strings.ReplaceAll(t.Name(), "/", "_"), runs)
		prefixes[t] = p
		t.Cleanup(func() {
			prefixMu.Lock()
			delete(prefixes, t)
			prefixMu.Unlock()
		})
	}
	return p
}

// open returns a Store on the shared member under the test's prefix,
// closed at the end of the test.
func open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(ctxT(t, 5*time.Second), shared.Endpoints(), testPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ctxT is a context that ends after d or with the test.
func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		<-tick.C
	}
}

// closedWithin reports whether ch closes within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago; holding all listeners until the end keeps them distinct.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var ls []net.Listener
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}
