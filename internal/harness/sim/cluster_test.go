package sim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/dataplane/simnet"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// cluster is one simulated cluster and what the simulation knows of it.
type cluster struct {
	seed      uint64
	p         params
	start     time.Time
	net       *simnet.Net
	local     *node.Local
	log       *slog.Logger
	logs      *lineLog
	book      *book
	ctx       context.Context
	results   chan *worker
	trainTime time.Duration

	mu       sync.Mutex
	workers  []*worker
	live     int  // workers started and not yet returned
	pending  int  // replacements not yet started
	stopping bool // no more workers start
	timeline []string
	problems []string
	kinds    []string
}

type worker struct {
	id     string
	cancel context.CancelFunc
	killed bool // by the schedule
	done   bool // returned
	err    error
	status atomic.Pointer[string] // what it is doing, for a stall's report
}

func (w *worker) set(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	w.status.Store(&s)
}

type workerKey struct{}

// worker returns the worker whose job runs under ctx.
func (c *cluster) worker(ctx context.Context) *worker { return ctx.Value(workerKey{}).(*worker) }

func (c *cluster) since() string {
	return fmt.Sprintf("%.3fs", time.Since(c.start).Seconds())
}

// note adds an event to the timeline a failure prints.
func (c *cluster) note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timeline = append(c.timeline, c.since()+" "+fmt.Sprintf(format, args...))
}

// maxPerKind bounds the problems of one kind a failure lists.
const maxPerKind = 3

// problem records an invariant violation of a kind, and says so on stderr
// at once: should the bubble then deadlock, the seed is still known.
func (c *cluster) problem(kind, format string, args ...any) {
	msg := kind + ": " + fmt.Sprintf(format, args...)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kinds = append(c.kinds, kind)
	c.timeline = append(c.timeline, c.since()+" VIOLATION "+msg)
	n := 0
	for _, k := range c.kinds {
		if k == kind {
			n++
		}
	}
	switch {
	case n == maxPerKind+1:
		c.problems = append(c.problems, kind+": more of these follow (see the timeline)")
		return
	case n > maxPerKind:
		return
	}
	c.problems = append(c.problems, msg)
	fmt.Fprintf(os.Stderr, "sim: seed %d at %s: %s (replay: TERRACE_SIM_SEED=%d go test ./internal/harness/sim -run TestSimulation -v)\n", c.seed, c.since(), msg, c.seed)
}

// layout returns the coordinator's current layout (the simulation asks
// the coordinator directly, not over the network).
func (c *cluster) layout() *layout.Layout {
	l, err := c.local.Coord.Layout(context.Background(), 0)
	if err != nil {
		panic(err) // there is always a layout after version 0
	}
	return l
}

func (c *cluster) watchLayouts(ctx context.Context) {
	ids := func(ss []ring.Server) string {
		var out []string
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return strings.Join(out, " ")
	}
	for v := uint64(0); ; {
		l, err := c.local.Coord.Layout(ctx, v)
		if err != nil {
			return
		}
		v = l.Version
		c.note("layout v%d epoch %d: servers [%s] joining [%s] workers %d finished %v", l.Version, l.Epoch, ids(l.Servers), ids(l.Joining), l.Workers, l.Finished)
	}
}

// startWorker starts a worker under a new ID (a new host, and a new rank).
func (c *cluster) startWorker() {
	c.mu.Lock()
	if c.stopping {
		c.mu.Unlock()
		return
	}
	w := &worker{id: fmt.Sprintf("worker-%d", len(c.workers))}
	ctx, cancel := context.WithCancel(context.WithValue(c.ctx, workerKey{}, w))
	w.cancel = cancel
	c.workers = append(c.workers, w)
	c.live++
	c.mu.Unlock()
	c.note("start %s", w.id)
	go func() {
		_, err := node.RunWorker(ctx, node.WorkerConfig{ID: w.id, Coordinator: c.local.CoordAddr, Logger: c.log.With("node", w.id), Network: c.net.Host(w.id)}, c.job)
		c.mu.Lock()
		w.done, w.err = true, err
		c.live--
		c.mu.Unlock()
		c.results <- w
	}()
}

// stopWorkers stops every worker and waits for them.
func (c *cluster) stopWorkers() {
	c.mu.Lock()
	c.stopping = true
	for _, w := range c.workers {
		w.cancel()
	}
	live := c.live
	c.mu.Unlock()
	for ; live > 0; live-- {
		<-c.results
	}
}

// awaitTraining waits until every worker has finished, replacing workers
// that were killed or declared dead, or until the time limit.
func (c *cluster) awaitTraining() {
	limit := time.NewTimer(timeLimit)
	defer limit.Stop()
	for {
		c.mu.Lock()
		done := c.live == 0 && c.pending == 0
		c.mu.Unlock()
		if done {
			c.trainTime = time.Since(c.start)
			c.note("training finished")
			return
		}
		select {
		case w := <-c.results:
			switch {
			case w.err == nil:
				c.note("%s finished", w.id)
			case w.killed:
				c.note("%s stopped: %v", w.id, w.err)
			case errors.Is(w.err, api.ErrLeaseLost):
				// Declared dead while alive (cut off from the
				// coordinator): it stops, as a real worker exits, and a
				// new one takes its place.
				c.note("%s fenced out: %v", w.id, w.err)
				c.startWorker()
			default:
				c.problem(failed, "%s: %v", w.id, w.err)
				c.startWorker()
			}
		case <-limit.C:
			c.problem(stall, "not within %v of fake time: %s; goroutine stacks in %s", timeLimit, c.stalled(), c.dumpStacks())
			return
		}
	}
}

// stalled describes what every live worker is doing, and each server's
// clock minimum (the slowest worker's clock that reads wait on).
func (c *cluster) stalled() string {
	var out []string
	c.mu.Lock()
	for _, w := range c.workers {
		if !w.done {
			st := "starting"
			if p := w.status.Load(); p != nil {
				st = *p
			}
			out = append(out, fmt.Sprintf("%s: %s", w.id, st))
		}
	}
	c.mu.Unlock()
	var mins []string
	for _, s := range c.local.Servers {
		mins = append(mins, strconv.FormatInt(s.Stats().MinClock, 10))
	}
	out = append(out, fmt.Sprintf("clock minimum of every server started, killed ones too, in the order they started: %s", strings.Join(mins, " ")))
	return strings.Join(out, "; ")
}

// dumpStacks writes the stacks of this bubble's goroutines to a file and
// returns its name.
func (c *cluster) dumpStacks() string {
	self := make([]byte, 256)
	self = self[:runtime.Stack(self, false)]
	i := bytes.Index(self, []byte("synctest bubble "))
	if i < 0 {
		return "(none: not in a bubble)"
	}
	tag := self[i : i+bytes.IndexByte(self[i:], ']')+1] // "synctest bubble N]"
	all := make([]byte, 32<<20)
	all = all[:runtime.Stack(all, true)]
	var out bytes.Buffer
	for _, g := range bytes.Split(all, []byte("\n\n")) {
		if first, _, _ := bytes.Cut(g, []byte("\n")); bytes.Contains(first, tag) {
			out.Write(g)
			out.WriteString("\n\n")
		}
	}
	name := filepath.Join(os.TempDir(), fmt.Sprintf("terrace-sim-seed-%d.stacks", c.seed))
	if err := os.WriteFile(name, out.Bytes(), 0o644); err != nil {
		return fmt.Sprintf("(not written: %v)", err)
	}
	return name
}

// job is every worker's training loop: leased partitions, epoch by epoch.
func (c *cluster) job(ctx context.Context, cl *ps.Client) (any, error) {
	rank := cl.Rank()
	w := c.worker(ctx)
	tb, err := cl.CreateTable(ctx, table.Spec{Name: "counters", Width: 1, Consistency: table.Consistency{Model: table.SSP, Staleness: c.p.staleness}})
	if err != nil {
		return nil, err
	}
	cl.KeepState(func(int) ps.PartitionState { return &trained{} })
	for e := range epochs {
		w.set("rank %d: asking for work in epoch %d at clock %d", rank, e, cl.Clock())
		err := cl.EachPartition(ctx, e, ps.Loop{
			Order: func(int, int) []int { return allRows },
			Batch: 1, ProgressEvery: progressEvery,
			Begin: func(context.Context, *ps.Lease) error {
				// A worker that waited for this lease comes back at the
				// highest clock reported (wire.ClockIdle): Work sent it.
				c.book.tick(rank, cl.Clock())
				return nil
			},
			Step: func(ctx context.Context, b ps.Batch) (*ps.Future, error) {
				if err := c.step(ctx, cl, tb, e, b.Lease.Partition, b.Lo); err != nil {
					return nil, fmt.Errorf("minibatch %d: %w", b.Lo, err)
				}
				b.Lease.State().(*trained)[b.Lo]++
				return nil, nil
			},
			Completed: func(l *ps.Lease) {
				if r := slices.IndexFunc(l.State().(*trained)[:], func(n uint8) bool { return int(n) != e+1 }); r >= 0 {
					c.problem(lostState, "rank %d epoch %d partition %d: row %d trained %d times by the state's account", rank, e, l.Partition, r, l.State().(*trained)[r])
				}
				w.set("rank %d: asking for work in epoch %d at clock %d", rank, e, cl.Clock())
			},
		})
		if err != nil {
			return nil, err
		}
		// The epoch's barrier may have moved the clock up.
		c.book.tick(rank, cl.Clock())
	}
	w.set("rank %d: finishing", rank)
	c.book.tick(rank, 1<<63-1)
	return nil, cl.Finish().Wait(ctx)
}

// allRows is every partition's order: its rows, one a minibatch.
var allRows = func() []int {
	o := make([]int, rows)
	for i := range o {
		o[i] = i
	}
	return o
}()

// trained is a partition's worker state: how many times each row was
// trained, by the account of the state that moves with the partition.
// Rows a dead worker trained past its last progress are trained again,
// but each appears in the state once per epoch.
type trained [rows]uint8

func (t *trained) MarshalBinary() ([]byte, error) { return slices.Clone(t[:]), nil }

func (t *trained) UnmarshalBinary(b []byte) error {
	if len(b) != rows {
		return fmt.Errorf("partition state of %d bytes, want %d", len(b), rows)
	}
	copy(t[:], b)
	return nil
}

// hotKey is rank r's own counter, which every minibatch of r increments
// and every read includes: the sharpest test of the staleness bound.
func hotKey(r int) uint64 { return keySpace + uint64(r)*keyspace.SlotSize }

// step is one minibatch: read, compute, push +1, end the clock. The
// simulation's book records the push and the clock, and checks the read.
func (c *cluster) step(ctx context.Context, cl *ps.Client, tb *ps.Table, e, part, off int) error {
	rank := cl.Rank()
	w := c.worker(ctx)
	// The same minibatch touches the same keys whoever trains it.
	r := rand.New(rand.NewPCG(c.seed, uint64(e)<<40|uint64(part)<<20|uint64(off)))
	set := map[uint64]bool{hotKey(rank): true}
	for len(set) < c.p.keysPerStep+1 {
		set[r.Uint64N(keySpace)] = true
	}
	keys := make([]uint64, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	read := slices.Clone(keys)
	for w := range cl.Layout().Workers {
		read = append(read, hotKey(w))
	}
	slices.Sort(read)
	read = slices.Compact(read)

	clock := cl.Clock()
	w.set("rank %d: epoch %d partition %d minibatch %d: reading at clock %d", rank, e, part, off, clock)
	vals := make([]float32, len(read))
	if err := tb.Pull(read, vals).Wait(ctx); err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	if msg := c.book.checkRead(rank, clock, c.p.staleness, read, vals, c.layout().Finished); msg != "" {
		c.problem(stale, "%s", msg)
	}
	w.set("rank %d: epoch %d partition %d minibatch %d: computing at clock %d", rank, e, part, off, clock)
	time.Sleep(ms(r, 2, 25))

	w.set("rank %d: epoch %d partition %d minibatch %d: pushing at clock %d", rank, e, part, off, clock)
	rec := c.book.pushing(rank, keys)
	ones := make([]float32, len(keys))
	for i := range ones {
		ones[i] = 1
	}
	if err := tb.Push(keys, ones).Wait(ctx); err != nil {
		return fmt.Errorf("push: %w", err)
	}
	c.book.ack(rec)
	c.book.tick(rank, clock+1)
	cl.Tick()
	return nil
}

// checkFinal reads every counter through a fresh client and compares it
// with the acknowledged increments.
func (c *cluster) checkFinal(ctx context.Context) {
	host := c.net.Host("checker")
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cl, err := ps.Dial(cctx, c.local.CoordAddr, ps.Options{Rank: -1, NodeID: "checker", Logger: c.log.With("node", "checker"), Network: host})
	if err != nil {
		c.problem(broken, "final read: %v", err)
		return
	}
	defer cl.Close()
	tb, err := cl.Table(cctx, "counters")
	if err != nil {
		c.problem(broken, "final read: %v", err)
		return
	}
	keys := make([]uint64, 0, keySpace)
	for k := range uint64(keySpace) {
		keys = append(keys, k)
	}
	for w := range c.layout().Workers {
		keys = append(keys, hotKey(w))
	}
	got := make([]float32, len(keys))
	if err := tb.Pull(keys, got).Wait(cctx); err != nil {
		c.problem(broken, "final read: %v", err)
		return
	}
	unc := c.book.uncertain()
	var bad []string
	for i, k := range keys {
		a, u, v := c.book.ackedCount(k), unc[k], int64(got[i])
		if v < a || v > a+u {
			bad = append(bad, fmt.Sprintf("key %d (slot %d): %d, want %d acknowledged (+ up to %d unconfirmed)", k, k/keyspace.SlotSize, v, a, u))
		}
	}
	if len(bad) > 0 {
		c.problem(exactlyOnce, "%d keys wrong in the final model: %s", len(bad), strings.Join(bad[:min(len(bad), 10)], "; "))
	}
}

// runFaults applies the schedule's faults at their times.
func (c *cluster) runFaults(ctx context.Context) {
	for _, f := range c.p.faults {
		if !sleep(ctx, time.Until(c.start.Add(f.at))) {
			return
		}
		c.apply(ctx, f)
	}
}

// sleep waits d and reports true, or false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *cluster) apply(ctx context.Context, f fault) {
	r := rand.New(rand.NewPCG(f.pick, 0))
	lay := c.layout()
	// k = 2 survives one server fault at a time: kill only when more than
	// two servers are on the ring and no join is under way; join only up
	// to maxServers. A fault that cannot happen becomes the other one.
	canKill := len(lay.Servers) > 2 && len(lay.Joining) == 0
	canJoin := len(lay.Servers)+len(lay.Joining) < maxServers
	kind := f.kind
	switch {
	case kind == killServer && !canKill:
		kind = joinServer
	case kind == joinServer && !canJoin:
		kind = killServer
	}
	if kind == killServer && !canKill || kind == joinServer && !canJoin {
		c.note("skip %v: neither a kill nor a join is safe now", f)
		return
	}
	switch kind {
	case killServer:
		id := lay.Servers[r.IntN(len(lay.Servers))].ID
		i, _ := strconv.Atoi(strings.TrimPrefix(id, "server-"))
		c.note("FAULT kill %s", id)
		c.net.Crash(id)
		c.local.KillServer(i)
	case joinServer:
		jctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		c.note("FAULT join a new server")
		if _, err := c.local.AddServer(jctx); err != nil && ctx.Err() == nil {
			c.problem(broken, "a new server did not join: %v", err)
		}
	case killWorker:
		c.mu.Lock()
		var alive []*worker
		for _, w := range c.workers {
			if !w.done && !w.killed {
				alive = append(alive, w)
			}
		}
		if len(alive) == 0 {
			c.mu.Unlock()
			return
		}
		w := alive[r.IntN(len(alive))]
		w.killed = true
		c.pending++
		c.mu.Unlock()
		c.note("FAULT kill %s; replacement in %v", w.id, f.dur)
		c.net.Crash(w.id)
		w.cancel()
		time.AfterFunc(f.dur, func() {
			c.startWorker()
			c.mu.Lock()
			c.pending--
			c.mu.Unlock()
		})
	case partition:
		a, b := c.pickLink(r, lay)
		c.note("FAULT partition %s | %s for %v", a, b, f.dur)
		c.net.Partition(a, b)
		sleep(ctx, f.dur)
		c.net.Heal(a, b)
		c.note("healed %s | %s", a, b)
	case spike:
		a, b := c.pickLink(r, lay)
		c.note("FAULT delay %s - %s +%v for %v", a, b, f.extra, f.dur)
		c.net.Delay(a, b, f.extra)
		sleep(ctx, f.dur)
		c.net.Delay(a, b, 0)
		c.note("delay over %s - %s", a, b)
	case drop:
		if a, b, ok := c.net.Drop(r); ok {
			c.note("FAULT reset a connection %s - %s", a, b)
		}
	}
}

// pickLink chooses two nodes: a worker and a server, two servers, the
// coordinator and a server, or the coordinator and a worker.
func (c *cluster) pickLink(r *rand.Rand, lay *layout.Layout) (string, string) {
	var srv []string
	for _, s := range append(slices.Clone(lay.Servers), lay.Joining...) {
		srv = append(srv, s.ID)
	}
	var wrk []string
	c.mu.Lock()
	for _, w := range c.workers {
		if !w.done && !w.killed {
			wrk = append(wrk, w.id)
		}
	}
	c.mu.Unlock()
	pick := func(ids []string) string { return ids[r.IntN(len(ids))] }
	for {
		switch x := r.IntN(100); {
		case x < 40 && len(wrk) > 0:
			return pick(wrk), pick(srv)
		case x >= 40 && x < 65 && len(srv) > 1:
			i := r.IntN(len(srv))
			j := (i + 1 + r.IntN(len(srv)-1)) % len(srv)
			return srv[i], srv[j]
		case x >= 65 && x < 85:
			return "coordinator", pick(srv)
		case x >= 85 && len(wrk) > 0:
			return "coordinator", pick(wrk)
		}
	}
}
