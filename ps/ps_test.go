package ps_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

func cluster(t *testing.T, servers, workers int) (*node.Local, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: servers, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, ctx
}

// run runs job on every worker of a fresh cluster and fails the test on error.
func run(t *testing.T, servers, workers int, job node.Job) *node.Local {
	t.Helper()
	l, ctx := cluster(t, servers, workers)
	if _, err := l.RunWorkers(ctx, job); err != nil {
		t.Fatal(err)
	}
	return l
}

// awaitLayout waits for a layout of l's coordinator for which done holds.
func awaitLayout(ctx context.Context, l *node.Local, done func(*layout.Layout) bool) error {
	for v := uint64(0); ; {
		lay, err := l.Coord.Layout(ctx, v)
		if err != nil {
			return err
		}
		if done(lay) {
			return nil
		}
		v = lay.Version
	}
}

// threeServers holds for a layout with three servers on the ring.
func threeServers(lay *layout.Layout) bool { return len(lay.Servers) == 3 }

func randomKeys(rng *rand.Rand, n int, space uint64) []uint64 {
	set := map[uint64]bool{}
	for len(set) < n {
		set[rng.Uint64N(space)] = true
	}
	keys := make([]uint64, 0, n)
	for k := range set {
		keys = append(keys, k)
	}
	return sortU64(keys)
}

// pullAll reads keys 0..n-1 of tb.
func pullAll(ctx context.Context, tb *ps.Table, n int) ([]float32, error) {
	all := make([]uint64, n)
	for i := range all {
		all[i] = uint64(i)
	}
	got := make([]float32, n*tb.Spec().Width)
	return got, tb.Pull(all, got).Wait(ctx)
}

// holdsAcked waits for every worker (Barrier) and then, on rank 0, checks
// that counters 0..n-1 of tb sum to want(), the acknowledged increments
// (read after the barrier, once every worker has counted its own).
func holdsAcked(ctx context.Context, c *ps.Client, tb *ps.Table, n int, want func() int64) error {
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if c.Rank() != 0 {
		return nil
	}
	got, err := pullAll(ctx, tb, n)
	if err != nil {
		return err
	}
	if sum, w := total(got), want(); sum != w {
		return fmt.Errorf("counters hold %d increments, %d were acknowledged", sum, w)
	}
	return nil
}

// total sums counter values.
func total(vals []float32) int64 {
	var sum int64
	for _, v := range vals {
		sum += int64(v)
	}
	return sum
}

func filled(n int, v float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func sortU64(k []uint64) []uint64 {
	for i := 1; i < len(k); i++ {
		for j := i; j > 0 && k[j] < k[j-1]; j-- {
			k[j], k[j-1] = k[j-1], k[j]
		}
	}
	return k
}

func TestPushPullAcrossServers(t *testing.T) {
	run(t, 3, 1, func(ctx context.Context, c *ps.Client) (any, error) {
		rng := rand.New(rand.NewPCG(1, 1))
		for _, w := range []int{1, 8} {
			for _, enc := range []table.Encoding{table.Raw, table.Sparse, table.FP16, table.Int8} {
				tb, err := c.CreateTable(ctx, table.Spec{Name: fmt.Sprintf("t%d%s", w, enc), Width: w, Encoding: enc})
				if err != nil {
					return nil, err
				}
				keys := randomKeys(rng, 5000, 1<<40)
				vals := make([]float32, len(keys)*w)
				for i := range vals {
					if i%3 == 0 {
						vals[i] = float32(i%7) - 3 // small integers survive every encoding exactly up to int8 scale
					}
				}
				for range 2 {
					if err := tb.Push(keys, vals).Wait(ctx); err != nil {
						return nil, err
					}
				}
				got := make([]float32, len(vals))
				if err := tb.Pull(keys, got).Wait(ctx); err != nil {
					return nil, err
				}
				for i := range vals {
					if d := math.Abs(float64(got[i] - 2*vals[i])); d > 0.05 {
						return nil, fmt.Errorf("width %d %s: value %d: got %v want %v", w, enc, i, got[i], 2*vals[i])
					}
				}
			}
		}
		return nil, nil
	})
}

func TestRangeOps(t *testing.T) {
	run(t, 2, 1, func(ctx context.Context, c *ps.Client) (any, error) {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "dense", Width: 3})
		if err != nil {
			return nil, err
		}
		r := keyspace.Range{Lo: 17, Hi: 17 + 300000} // several frames, partial slots at both ends
		vals := make([]float32, r.Len()*3)
		for i := range vals {
			vals[i] = float32(i % 1000)
		}
		got := make([]float32, len(vals))
		if err := tb.PushPullRange(r, vals, got).Wait(ctx); err != nil {
			return nil, err
		}
		for i := range vals {
			if got[i] != vals[i] {
				return nil, fmt.Errorf("pushpull: value %d: got %v want %v", i, got[i], vals[i])
			}
		}
		// The same keys read back one by one agree with the range.
		keys := []uint64{17, 18, 100, 5000, 17 + 299999}
		one := make([]float32, len(keys)*3)
		if err := tb.Pull(keys, one).Wait(ctx); err != nil {
			return nil, err
		}
		for i, k := range keys {
			for j := range 3 {
				if want := vals[int(k-17)*3+j]; one[i*3+j] != want {
					return nil, fmt.Errorf("key %d: got %v want %v", k, one[i*3+j], want)
				}
			}
		}
		return nil, nil
	})
}

// TestConsistencyBound runs workers at random speeds, each adding 1 to its
// own counter key once per clock, and checks every read: at clock c a
// worker must see every other worker's counter at c-s or more (and, under
// BSP, exactly c).
func TestConsistencyBound(t *testing.T) {
	for _, cons := range []table.Consistency{{Model: table.BSP}, {Model: table.SSP, Staleness: 1}, {Model: table.SSP, Staleness: 3}} {
		t.Run(cons.String(), func(t *testing.T) {
			const workers, clocks = 4, 30
			var mu sync.Mutex
			reads := 0
			run(t, 2, workers, func(ctx context.Context, c *ps.Client) (any, error) {
				tb, err := c.CreateTable(ctx, table.Spec{Name: "counters", Width: 1, Consistency: cons})
				if err != nil {
					return nil, err
				}
				rng := rand.New(rand.NewPCG(uint64(c.Rank()), 7))
				keys := make([]uint64, workers)
				for i := range keys {
					keys[i] = uint64(i) * 1000 // on different slots, so on different servers
				}
				got := make([]float32, workers)
				for clock := int64(0); clock < clocks; clock++ {
					if err := tb.Pull(keys, got).Wait(ctx); err != nil {
						return nil, err
					}
					for j, v := range got {
						if int64(v) < clock-int64(cons.Bound()) {
							return nil, fmt.Errorf("worker %d at clock %d read counter %d = %v: older than the bound %d", c.Rank(), clock, j, v, cons.Bound())
						}
						if cons.Model == table.BSP && int64(v) != clock {
							return nil, fmt.Errorf("BSP: worker %d at clock %d read counter %d = %v, want exactly %d", c.Rank(), clock, j, v, clock)
						}
					}
					mu.Lock()
					reads++
					mu.Unlock()
					time.Sleep(time.Duration(rng.IntN(1500)) * time.Microsecond)
					one := []float32{1}
					if err := tb.Push(keys[c.Rank():c.Rank()+1], one).Wait(ctx); err != nil {
						return nil, err
					}
					if err := c.Tick().Wait(ctx); err != nil {
						return nil, err
					}
				}
				return nil, c.Finish().Wait(ctx)
			})
			if reads != workers*clocks {
				t.Fatalf("%d reads, want %d", reads, workers*clocks)
			}
		})
	}
}

// TestBSPDeterministic: float addition is not associative, so a BSP run
// gives the same bits run after run only if servers apply each clock's
// pushes in an order that does not depend on arrival.
func TestBSPDeterministic(t *testing.T) {
	model := func() []float32 {
		var out []float32
		var mu sync.Mutex
		run(t, 2, 3, func(ctx context.Context, c *ps.Client) (any, error) {
			tb, err := c.CreateTable(ctx, table.Spec{Name: "m", Width: 1, Rule: table.Rule{Kind: table.AdaGrad, LR: 0.3}, Consistency: table.Consistency{Model: table.BSP}})
			if err != nil {
				return nil, err
			}
			rng := rand.New(rand.NewPCG(uint64(c.Rank()), 3))
			keys := make([]uint64, 200)
			for i := range keys {
				keys[i] = uint64(i * 37)
			}
			w := make([]float32, len(keys))
			for range 20 {
				if err := tb.Pull(keys, w).Wait(ctx); err != nil {
					return nil, err
				}
				g := make([]float32, len(keys))
				for i := range g {
					g[i] = float32(math.Sin(float64(w[i])*1.7+float64(i))) * (1 + rng.Float32()*1e-3)
				}
				time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
				tb.Push(keys, g)
				if err := c.Tick().Wait(ctx); err != nil {
					return nil, err
				}
			}
			if err := tb.Pull(keys, w).Wait(ctx); err != nil {
				return nil, err
			}
			if c.Rank() == 0 {
				mu.Lock()
				out = w
				mu.Unlock()
			}
			return nil, c.Finish().Wait(ctx)
		})
		return out
	}
	a, b := model(), model()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("value %d: %v in one run, %v in the other", i, a[i], b[i])
		}
	}
}

func TestBadArguments(t *testing.T) {
	run(t, 1, 1, func(ctx context.Context, c *ps.Client) (any, error) {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "t", Width: 2})
		if err != nil {
			return nil, err
		}
		if err := tb.Push([]uint64{3, 1}, make([]float32, 4)).Wait(ctx); !errors.Is(err, ps.ErrBadArgument) || !errors.Is(err, keyspace.ErrUnsorted) {
			return nil, fmt.Errorf("unsorted keys: %v", err)
		}
		if err := tb.Push([]uint64{1, 1}, make([]float32, 4)).Wait(ctx); !errors.Is(err, ps.ErrBadArgument) {
			return nil, fmt.Errorf("duplicate keys: %v", err)
		}
		if err := tb.Pull([]uint64{1, 2}, make([]float32, 3)).Wait(ctx); !errors.Is(err, ps.ErrBadArgument) {
			return nil, fmt.Errorf("short destination: %v", err)
		}
		if _, err := c.CreateTable(ctx, table.Spec{Name: "t", Width: 3}); err == nil {
			return nil, errors.New("a second table named t with another width was accepted")
		}
		return nil, nil
	})
}

func TestNonFiniteRefused(t *testing.T) {
	run(t, 1, 1, func(ctx context.Context, c *ps.Client) (any, error) {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "t", Width: 1})
		if err != nil {
			return nil, err
		}
		keys := []uint64{1, 2}
		if err := tb.Push(keys, []float32{1, 2}).Wait(ctx); err != nil {
			return nil, err
		}
		f := tb.Push(keys, []float32{float32(math.Inf(1)), 5})
		if err := f.Wait(ctx); err != nil {
			return nil, err
		}
		if f.Refused() != 1 || tb.Refused() != 1 {
			return nil, fmt.Errorf("refused %d (table %d), want 1", f.Refused(), tb.Refused())
		}
		got := make([]float32, 2)
		if err := tb.Pull(keys, got).Wait(ctx); err != nil {
			return nil, err
		}
		if got[0] != 1 || got[1] != 7 {
			return nil, fmt.Errorf("after a refused update: %v, want [1 7]", got)
		}
		nan := []float32{float32(math.NaN()), float32(math.NaN())}
		var last error
		for range 600 {
			if last = tb.Push(keys, nan).Wait(ctx); last != nil {
				break
			}
		}
		if !errors.Is(last, ps.ErrNonFinite) {
			return nil, fmt.Errorf("after 1200 refused updates: %v, want ErrNonFinite", last)
		}
		return nil, nil
	})
}

func TestKeyCachingShrinksRequests(t *testing.T) {
	l := run(t, 1, 1, func(ctx context.Context, c *ps.Client) (any, error) {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "t", Width: 1})
		if err != nil {
			return nil, err
		}
		keys := randomKeys(rand.New(rand.NewPCG(2, 2)), 10000, 1e7)
		vals := make([]float32, len(keys))
		for range 10 {
			if err := tb.Push(keys, vals).Wait(ctx); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	// 10 pushes of 10,000 keys: without caching 10 x 120 KB; with it, the
	// keys travel twice (first as a plain list, then to be cached).
	if in := l.Servers[0].Stats().BytesIn; in > 10*40000+3*80000+100000 {
		t.Fatalf("server received %d bytes: keys were not cached", in)
	}
}

func TestSignificanceFilterLosesNothing(t *testing.T) {
	run(t, 2, 1, func(ctx context.Context, c *ps.Client) (any, error) {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "t", Width: 1, Significance: 0.5})
		if err != nil {
			return nil, err
		}
		keys := []uint64{1, 2, 3, 4}
		for range 10 {
			if err := tb.Push(keys, []float32{0.1, 0.2, 0.3, 1}).Wait(ctx); err != nil {
				return nil, err
			}
		}
		got := make([]float32, 4)
		if err := tb.Pull(keys, got).Wait(ctx); err != nil {
			return nil, err
		}
		if got[0] >= 1 || got[3] != 10 {
			return nil, fmt.Errorf("before flush %v: small updates should be held back, large ones sent", got)
		}
		if err := tb.Flush().Wait(ctx); err != nil {
			return nil, err
		}
		if err := tb.Pull(keys, got).Wait(ctx); err != nil {
			return nil, err
		}
		for i, want := range []float32{1, 2, 3, 10} {
			if math.Abs(float64(got[i]-want)) > 1e-5 {
				return nil, fmt.Errorf("after flush %v: key %d lost updates", got, keys[i])
			}
		}
		return nil, nil
	})
}

// staticControl serves a fixed layout, for clients pointed at fake servers.
type staticControl struct{ l *layout.Layout }

func (s staticControl) Layout(ctx context.Context, after uint64) (*layout.Layout, error) {
	if s.l.Version > after {
		return s.l, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s staticControl) CreateTable(context.Context, table.Spec) (*layout.Layout, error) {
	return s.l, nil
}

func (s staticControl) Acquire(context.Context, int, int) (api.Grant, error) {
	return api.Grant{Done: true, Partition: -1}, nil
}

func (s staticControl) Progress(context.Context, api.Update) (api.ProgressReply, error) {
	return api.ProgressReply{}, nil
}
func (s staticControl) Split(context.Context, api.Split) (api.Grant, error) {
	return api.Grant{}, api.ErrNoSplit
}
func (s staticControl) State(context.Context, int, uint64) ([]byte, error) {
	return nil, api.ErrNoState
}
func (s staticControl) Heartbeat(context.Context, int, int64) error { return nil }
func (s staticControl) Leave(context.Context, int) error            { return nil }

func blackHole(t *testing.T, closeConns bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if closeConns {
				time.AfterFunc(50*time.Millisecond, func() { c.Close() })
			}
		}
	}()
	return ln.Addr().String()
}

func fakeLayout(addr string) *layout.Layout {
	spec := table.Spec{Name: "t", Width: 1}
	spec.Validate()
	return &layout.Layout{Version: 1, Epoch: 1, Ready: true, Workers: 1, Partitions: 1,
		Servers: []ring.Server{{ID: "s", Addr: addr}}, Tables: []layout.Table{{ID: 1, Spec: spec}}}
}

// TestLostServerNeverHangs: a server that accepts and then says nothing
// makes Wait return ErrTimeout at the caller's deadline; one that drops
// the connection fails the call with a typed error.
func TestLostServerNeverHangs(t *testing.T) {
	ctx := context.Background()
	c, err := ps.Connect(ctx, staticControl{fakeLayout(blackHole(t, false))}, ps.Options{Rank: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tb, err := c.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := tb.Pull([]uint64{1}, make([]float32, 1)).Wait(wctx); !errors.Is(err, ps.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent server: %v, want ErrTimeout", err)
	}

	c2, err := ps.Connect(ctx, staticControl{fakeLayout(blackHole(t, true))}, ps.Options{Rank: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	tb2, _ := c2.Table(ctx, "t")
	wctx2, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	err = tb2.Push([]uint64{1}, []float32{1}).Wait(wctx2)
	if err == nil || errors.Is(err, ps.ErrTimeout) {
		t.Fatalf("server that hangs up: %v, want a connection error before the deadline", err)
	}
}

// TestConnectFailsClearly: a client whose ready layout's servers are all
// gone says so, naming them, when its wait ends. It said only "waiting
// for the cluster layout: context deadline exceeded", and a worker took it
// for a cluster that had not formed (a whole cluster SIGKILLed and its
// coordinator started again on its --etcd-dir, the last server gone).
// beatCounter is staticControl that counts heartbeats.
type beatCounter struct {
	staticControl
	beats atomic.Int32
}

func (b *beatCounter) Heartbeat(context.Context, int, int64) error {
	b.beats.Add(1)
	return nil
}

// TestConnectHeartbeatsWhileWaiting: a worker waiting in Connect for a
// layout whose servers answer (a cluster restarted whole, its servers not
// back yet) heartbeats meanwhile. It said nothing until it connected, and
// the coordinator declared it dead at the failure timeout: it never
// trained once the servers came back.
func TestConnectHeartbeatsWhileWaiting(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	l := fakeLayout(addr)
	l.FailureTimeoutMillis = 250 // a heartbeat every 50 ms
	ctl := &beatCounter{staticControl: staticControl{l}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := ps.Connect(ctx, ctl, ps.Options{Rank: 0}); err == nil {
		t.Fatal("connected to a closed port")
	}
	if n := ctl.beats.Load(); n < 2 {
		t.Fatalf("%d heartbeats while Connect waited 1 s against a 250 ms failure timeout; want one every 50 ms", n)
	}
	got := ctl.beats.Load()
	time.Sleep(200 * time.Millisecond)
	if n := ctl.beats.Load(); n > got+1 { // one may have been under way as Connect returned
		t.Fatalf("heartbeats went on after Connect returned: %d, then %d", got, n)
	}
}

// TestFirstHeartbeatAtOnce: a worker heartbeats as soon as it starts
// waiting in Connect and again as soon as it has connected, not a fifth of
// the failure timeout later: the coordinator judges a worker whose
// heartbeat connection closed in half a timeout, and one killed before its
// first heartbeat only at the timeout (a worker killed 0.4 s in stalled
// the job 3.2 s, against 1.6-1.7 s once it heartbeats at once).
func TestFirstHeartbeatAtOnce(t *testing.T) {
	l := fakeLayout(blackHole(t, false))
	l.FailureTimeoutMillis = 3_600_000 // the next heartbeats are 12 minutes away
	ctl := &beatCounter{staticControl: staticControl{l}}
	c, err := ps.Connect(context.Background(), ctl, ps.Options{Rank: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for ctl.beats.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ctl.beats.Load(); n < 2 {
		t.Fatalf("%d heartbeats, want one on starting to connect and one on connecting, both at once", n)
	}
}

// TestConnectWhenServerReturns: a worker whose layout's only server does
// not answer connects once the server answers again at its address under
// the same layout (the last server on the ring, restarted, stays on it).
// It waited only for a newer layout, which never came, until its join
// timeout.
func TestConnectWhenServerReturns(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	l := fakeLayout(addr)
	l.FailureTimeoutMillis = 250 // tried again every 50 ms
	back := make(chan struct{})
	go func() {
		defer close(back)
		time.Sleep(300 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				if _, err := ln.Accept(); err != nil {
					return
				}
			}
		}()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ps.Connect(ctx, staticControl{l}, ps.Options{Rank: 0})
	<-back
	if err != nil {
		t.Fatalf("Connect after the server came back under the same layout: %v", err)
	}
	c.Close()
}

func TestConnectFailsClearly(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := ps.Connect(ctx, staticControl{fakeLayout(addr)}, ps.Options{Rank: 0})
	if err == nil {
		t.Fatal("connected to a closed port")
	}
	if !errors.Is(err, ps.ErrNoServer) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Connect to a layout whose server is gone: %v; want ErrNoServer naming %s, and the deadline", err, addr)
	}
}
