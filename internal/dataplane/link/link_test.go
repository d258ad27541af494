package link

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// fakeClock fires every timer at once and moves its time forward by the
// timer's duration, so a single goroutine's waits add up exactly; with
// block set, timers never fire and each wait is announced on waiting.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	block   bool
	waiting chan time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_000_000, 0), waiting: make(chan time.Duration, 16)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if f.block {
		f.waiting <- d
		return ch
	}
	f.now = f.now.Add(d)
	ch <- f.now
	return ch
}

func (f *fakeClock) elapsed(since time.Time) time.Duration { return f.Now().Sub(since) }

// drain reads everything from c until it is closed.
func drain(c net.Conn) chan int {
	done := make(chan int, 1)
	go func() {
		n, _ := io.Copy(io.Discard, c)
		done <- int(n)
	}()
	return done
}

func near(got, want time.Duration) bool {
	d := got - want
	return d < time.Microsecond && d > -time.Microsecond
}

// TestWritePacing: after the first bucketful, every byte costs 1/rate.
func TestWritePacing(t *testing.T) {
	clk := newFakeClock()
	l := New(1e6, Options{Burst: 10_000, Clock: clk})
	a, b := net.Pipe()
	done := drain(b)
	start := clk.Now()
	w := l.Wrap(a, "data")
	if n, err := w.Write(make([]byte, 250_000)); n != 250_000 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	// 240,000 bytes beyond the burst at 1 MB/s.
	if got := clk.elapsed(start); !near(got, 240*time.Millisecond) {
		t.Errorf("250 kB at 1 MB/s with a 10 kB burst took %v, want 240ms", got)
	}
	w.Close()
	if n := <-done; n != 250_000 {
		t.Errorf("peer read %d bytes", n)
	}
	if c := l.Counts()["data"]; c.Out != 250_000 || c.In != 0 {
		t.Errorf("counts %+v", c)
	}
}

// TestBucketSharedByTheMachine: two connections of one link share its
// bandwidth; a connection of another link does not.
func TestBucketSharedByTheMachine(t *testing.T) {
	clk := newFakeClock()
	l := New(1e6, Options{Burst: 10_000, Clock: clk})
	other := New(1e6, Options{Burst: 10_000, Clock: clk})
	var conns []net.Conn
	for _, lk := range []*Link{l, l, other} {
		a, b := net.Pipe()
		drain(b)
		conns = append(conns, lk.Wrap(a, "data"))
	}
	start := clk.Now()
	for _, c := range conns[:2] {
		if _, err := c.Write(make([]byte, 100_000)); err != nil {
			t.Fatal(err)
		}
	}
	// 200 kB through one bucket: 190 ms.
	if got := clk.elapsed(start); !near(got, 190*time.Millisecond) {
		t.Errorf("two connections of one machine, 100 kB each: %v, want 190ms", got)
	}
	start = clk.Now()
	if _, err := conns[2].Write(make([]byte, 100_000)); err != nil {
		t.Fatal(err)
	}
	if got := clk.elapsed(start); !near(got, 90*time.Millisecond) {
		t.Errorf("another machine's connection waited %v, want 90ms (its own bucket)", got)
	}
	if c := l.Counts()["data"]; c.Out != 200_000 {
		t.Errorf("counts %+v", c)
	}
}

// TestReadPacing: reads pay for what they read, in pieces of at most one
// bucketful, on the inbound bucket (independent of the outbound one).
func TestReadPacing(t *testing.T) {
	clk := newFakeClock()
	l := New(1e6, Options{Burst: 10_000, Clock: clk})
	a, b := net.Pipe()
	r := l.Wrap(a, "stream")
	go func() {
		b.Write(make([]byte, 110_000))
		b.Close()
	}()
	start := clk.Now()
	buf := make([]byte, 1<<20)
	total := 0
	for {
		n, err := r.Read(buf)
		if n > 10_000 {
			t.Fatalf("read %d bytes at once, more than the bucket", n)
		}
		total += n
		if err != nil {
			break
		}
	}
	if total != 110_000 {
		t.Fatalf("read %d bytes", total)
	}
	if got := clk.elapsed(start); !near(got, 100*time.Millisecond) {
		t.Errorf("110 kB read at 1 MB/s: %v, want 100ms", got)
	}
	if c := l.Counts()["stream"]; c.In != 110_000 || c.Out != 0 {
		t.Errorf("counts %+v", c)
	}
}

// fakeTimeConn ignores deadlines, which the link keeps on its fake clock
// while a pipe would hold them to the real one.
type fakeTimeConn struct{ net.Conn }

func (fakeTimeConn) SetWriteDeadline(time.Time) error { return nil }

// TestWriteDeadline: a write that would need tokens past its deadline
// waits until the deadline and fails as the socket would.
func TestWriteDeadline(t *testing.T) {
	clk := newFakeClock()
	l := New(1000, Options{Burst: 100, Clock: clk})
	a, b := net.Pipe()
	drain(b)
	w := l.Wrap(fakeTimeConn{a}, "data")
	start := clk.Now()
	w.SetWriteDeadline(start.Add(50 * time.Millisecond))
	n, err := w.Write(make([]byte, 1000))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n != 100 {
		t.Fatalf("write past the deadline: %d, %v; want 100 bytes and a deadline error", n, err)
	}
	if got := clk.elapsed(start); !near(got, 50*time.Millisecond) {
		t.Errorf("failed after %v, want at the deadline (50ms)", got)
	}
	w.SetWriteDeadline(time.Time{})
	start = clk.Now()
	// The cancelled reservation gave its tokens back: the next 100 bytes
	// wait only for the 50 ms they cost beyond the 50 already earned.
	if _, err := w.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if got := clk.elapsed(start); got > 100*time.Millisecond {
		t.Errorf("next write waited %v: the timed-out reservation kept its tokens", got)
	}
}

// TestCloseEndsAWait: closing a connection releases a write waiting for
// tokens.
func TestCloseEndsAWait(t *testing.T) {
	clk := newFakeClock()
	clk.block = true
	l := New(1000, Options{Burst: 100, Clock: clk})
	a, b := net.Pipe()
	drain(b)
	w := l.Wrap(a, "data")
	errc := make(chan error, 1)
	go func() {
		_, err := w.Write(make([]byte, 1000))
		errc <- err
	}()
	<-clk.waiting
	w.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write ended by close: %v, want net.ErrClosed", err)
	}
}

// TestUnlimited: a link of 0 bytes/s never waits, and still counts.
func TestUnlimited(t *testing.T) {
	clk := newFakeClock()
	clk.block = true // any wait would hang the test
	l := New(0, Options{Clock: clk})
	a, b := net.Pipe()
	done := drain(b)
	w := l.Wrap(a, "data")
	if _, err := w.Write(make([]byte, 5<<20)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	<-done
	if c := l.Counts()["data"]; c.Out != 5<<20 {
		t.Errorf("counts %+v", c)
	}
}

// TestWrapListener paces accepted connections on the listener's link.
func TestWrapListener(t *testing.T) {
	clk := newFakeClock()
	l := New(1e6, Options{Burst: 10_000, Clock: clk})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := l.WrapListener(ln, "data")
	defer wl.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Write(make([]byte, 60_000))
			c.Close()
		}
	}()
	c, err := wl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	n, _ := io.Copy(io.Discard, c)
	if n != 60_000 || !near(clk.elapsed(start), 50*time.Millisecond) {
		t.Errorf("accepted connection read %d bytes in %v, want 60000 in 50ms", n, clk.elapsed(start))
	}
}
