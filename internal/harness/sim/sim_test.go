package sim_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/simnet"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/process/node"
)

// defaultSchedules is how many schedules a plain `go test` runs (about a
// minute and a half on two cores); -short runs shortSchedules.
const (
	defaultSchedules = 1000
	shortSchedules   = 100
)

// TestSimulation runs seeded random fault schedules against a whole
// cluster in fake time (see docs/design/sim.md) and checks, for each, that
// every acknowledged increment is in the final model exactly once, that
// every read respected the staleness bound, and that training finished.
// TERRACE_SIM_SEED=N runs seed N alone, with its timeline and logs (the
// command a failure prints); TERRACE_SIM_SCHEDULES=M runs M schedules, from
// seed N if given, else from 1.
func TestSimulation(t *testing.T) {
	first, n := uint64(1), defaultSchedules
	if testing.Short() {
		n = shortSchedules
	}
	if v := os.Getenv("TERRACE_SIM_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TERRACE_SIM_SEED=%q: %v", v, err)
		}
		first, n = s, 1
	}
	if v := os.Getenv("TERRACE_SIM_SCHEDULES"); v != "" {
		m, err := strconv.Atoi(v)
		if err != nil || m < 1 {
			t.Fatalf("TERRACE_SIM_SCHEDULES=%q: want a positive count", v)
		}
		n = m
	}
	var sum summary
	t.Cleanup(func() { sum.report(t, n) })
	for seed := first; seed < first+uint64(n); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { runSchedule(t, seed, &sum, n <= detailUpTo) })
		})
	}
}

// The kinds of violation.
const (
	exactlyOnce = "acknowledged increments not applied exactly once"
	stale       = "staleness bound broken"
	lostState   = "partition state did not move with its partition"
	stall       = "training did not finish"
	failed      = "a worker failed"
	broken      = "cluster broken"
)

// summary collects the failing seeds of a run by kind of violation.
type summary struct {
	mu     sync.Mutex
	byKind map[string][]uint64
	seeds  map[uint64]bool
}

func (s *summary) add(seed uint64, kinds []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKind == nil {
		s.byKind, s.seeds = map[string][]uint64{}, map[uint64]bool{}
	}
	s.seeds[seed] = true
	for _, k := range kinds {
		if !slices.Contains(s.byKind[k], seed) {
			s.byKind[k] = append(s.byKind[k], seed)
		}
	}
}

func (s *summary) report(t *testing.T, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seeds) == 0 {
		return
	}
	var lines []string
	for _, k := range []string{exactlyOnce, stale, lostState, stall, failed, broken} {
		if seeds := s.byKind[k]; len(seeds) > 0 {
			slices.Sort(seeds)
			lines = append(lines, fmt.Sprintf("%s: %d seeds %v", k, len(seeds), seeds))
		}
	}
	t.Errorf("%d of %d schedules failed:\n%s", len(s.seeds), n, strings.Join(lines, "\n"))
}

// detailUpTo is the largest run whose failures print their timeline and
// logs; larger runs print one paragraph a failing seed.
const detailUpTo = 10

// runSchedule simulates one schedule and reports what it broke, in detail
// if asked. It runs in a synctest bubble, and returns only once every
// goroutine it started has ended.
func runSchedule(t *testing.T, seed uint64, sum *summary, detail bool) {
	p := newParams(seed)
	c := &cluster{seed: seed, p: p, start: time.Now(), book: newBook(), logs: &lineLog{}, results: make(chan *worker, 16)}
	c.net = simnet.New(simnet.Config{Seed: seed, MinDelay: 200 * time.Microsecond, MaxDelay: 2 * time.Millisecond})
	c.log = slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.String("t", c.since()) // fake time since the start
		}
		return a
	}}))
	ctx, cancel := context.WithCancel(context.Background())
	c.ctx = ctx
	// Epochs numbered as etcd revisions would be: growing, with gaps.
	var rev uint64
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: servers, Workers: p.workers, Partitions: partitions, Replication: 2, Logger: c.log,
		Network: func(id string) transport.Network { return c.net.Host(id) },
		Persist: func(_ context.Context, _ []byte, placement *layout.Layout) (uint64, error) {
			rev += 3
			if placement == nil {
				return 0, nil
			}
			return rev, nil
		}})
	if err != nil {
		c.problem(broken, "the cluster did not start: %v", err)
	} else {
		c.local = l
		go c.watchLayouts(ctx)
		for range p.workers {
			c.startWorker()
		}
		fctx, stopFaults := context.WithCancel(ctx)
		faultsDone := make(chan struct{})
		go func() {
			defer close(faultsDone)
			c.runFaults(fctx)
		}()
		c.awaitTraining()
		stopFaults()
		<-faultsDone
		// Workers still running (training stalled) stop as if killed:
		// their pushes in flight stay unconfirmed. The final model is
		// checked either way.
		c.stopWorkers()
		c.checkFinal(ctx)
	}
	// Stop everything, and give every goroutine (fake) time to end: the
	// bubble must be empty when this returns.
	cancel()
	if c.local != nil {
		if err := c.local.Close(); err != nil {
			c.note("nodes stopped: %v", err)
		}
	}
	c.net.Close()
	time.Sleep(2 * time.Minute)

	acked, reads := c.book.totals()
	if len(c.problems) == 0 {
		t.Logf("seed %d: %v; %d increments acknowledged, %d reads checked, training took %v of fake time", seed, p, acked, reads, c.trainTime)
		return
	}
	sum.add(seed, c.kinds)
	msg := fmt.Sprintf("seed %d failed; replay with TERRACE_SIM_SEED=%d go test ./internal/harness/sim -run TestSimulation -v\nschedule: %v\n%s",
		seed, seed, p, strings.Join(c.problems, "\n"))
	if detail {
		msg += fmt.Sprintf("\ntimeline:\n  %s\nlast log lines:\n  %s", strings.Join(c.timeline, "\n  "), strings.Join(c.logs.last(150), "\n  "))
	}
	t.Error(msg)
}

// lineLog keeps the last lines the nodes logged.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	next  int
}

const keepLines = 400

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := strings.TrimRight(string(p), "\n")
	if len(l.lines) < keepLines {
		l.lines = append(l.lines, line)
	} else {
		l.lines[l.next] = line
	}
	l.next = (l.next + 1) % keepLines
	return len(p), nil
}

// last returns up to n of the newest lines, oldest first.
func (l *lineLog) last(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := slices.Clone(l.lines)
	if len(l.lines) == keepLines {
		all = append(slices.Clone(l.lines[l.next:]), l.lines[:l.next]...)
	}
	return all[max(0, len(all)-n):]
}
