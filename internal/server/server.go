package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/storage/store"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

// Options configure a Server.
type Options struct {
	// ID is the server's node ID, as it appears in the range map.
	ID string
	// MaxPayload bounds an incoming frame's payload (wire.DefaultMaxPayload if 0).
	MaxPayload int
	// KeyCacheBytes bounds the cached key lists kept per connection (64 MiB if 0).
	KeyCacheBytes int
	Logger        *slog.Logger
	// OnSynced, when set, is told once this server has shipped full copies
	// of the slots it heads to the servers that will hold them once a
	// joining or leaving server has moved (the first phase of a handoff),
	// for the layout version given.
	OnSynced func(joiner string, version uint64)
	// OnRebuilt, when set, is told once this server's rebuild for layout
	// version has ended: the full copies it owed the new members of the
	// chains it heads under that layout are acknowledged, so each of them
	// holds every update this server acknowledged there. The simulation
	// counts copies of slots with it.
	OnRebuilt func(version uint64)
	// OnCheckpointed and OnRestored are told when this server has written
	// its part of a cluster checkpoint, or loaded its slots from one.
	OnCheckpointed func(seq uint64, err error)
	OnRestored     func(seq uint64, err error)
	// Network makes the connections to peer servers (TCP if nil).
	Network transport.Network
}

// Server serves its share of every table.
type Server struct {
	opts Options
	log  *slog.Logger

	mu     sync.RWMutex
	lay    *layout.Layout
	ring   *ring.Map
	chains chains
	me     int
	tables map[uint32]*tableState
	// changed is closed and replaced whenever Configure installs a layout.
	changed chan struct{}
	// done is closed when the server stops serving.
	done chan struct{}

	clocks clocks
	bsp    deferred
	held   heldPushes // BSP pushes held for their heads (bsp.go)
	stats  counters
	dedup  dedup
	// applyMu is held for reading while a push is applied and queued for
	// replication, and for writing while a replicator takes a round and
	// reads its state (see replicator.loop).
	applyMu sync.RWMutex

	replMu sync.Mutex
	repl   map[string]*replicator // by peer server ID

	// replicaMu orders replication imports; replicaGen numbers each
	// sender's replica connections, and only the newest may import, so that
	// frames still in flight on a sender's old connection cannot land after
	// newer state sent on its new one.
	replicaMu  sync.Mutex
	replicaGen map[string]uint64

	handoff      sync.Mutex
	handoffStats HandoffStats

	// changes lists the chain changes this server has installed (sync.go);
	// appended under applyMu and mu, both held for writing.
	changes []chainsChange

	ckptSeq, restoredSeq uint64        // guarded by mu
	lastRebuild          chan struct{} // closed when the newest rebuild is done; guarded by mu

	connMu sync.Mutex
	conns  map[*transport.Conn]struct{}
	closed bool
}

type tableState struct {
	id    uint32
	spec  table.Spec
	store *store.Table
}

type counters struct {
	pushes, pulls, clocks, keysPushed, keysPulled, refused, bytesIn, errors atomic.Int64
	duplicates, replicated                                                  atomic.Int64
}

// New returns a server that serves nothing until Configure gives it a layout.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.KeyCacheBytes <= 0 {
		o.KeyCacheBytes = 64 << 20
	}
	return &Server{
		opts:    o,
		log:     o.Logger.With("server", o.ID),
		tables:  make(map[uint32]*tableState),
		conns:   make(map[*transport.Conn]struct{}),
		changed: make(chan struct{}),
		done:    make(chan struct{}),
		repl:    make(map[string]*replicator),

		replicaGen: make(map[string]uint64),
	}
}

// catchUpWait bounds how long a connection waits for this server to learn
// a layout that a client already has (epoch) or a table it names.
const catchUpWait = 2 * time.Second

// catchUp blocks until ready, read under the server's lock, holds for
// the server's layout, or catchUpWait runs out. Blocking the connection's
// reader keeps that connection's requests in order, which refusing and
// having the client retry would not.
func (s *Server) catchUp(ready func() bool) {
	deadline := time.NewTimer(catchUpWait)
	defer deadline.Stop()
	for {
		s.mu.RLock()
		ok := ready()
		ch := s.changed
		s.mu.RUnlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			return
		}
	}
}

// awaitWorkers waits, at most catchUpWait, for a layout with n workers.
func (s *Server) awaitWorkers(n int) {
	s.catchUp(func() bool { return s.lay != nil && s.lay.Workers >= n })
}

// awaitLayout waits, at most catchUpWait, until the server's layout is at
// epoch or later and knows table; a negative table waits for the epoch
// alone.
func (s *Server) awaitLayout(epoch uint64, table int64) {
	s.catchUp(func() bool {
		return s.ring != nil && s.ring.Epoch >= epoch && (table < 0 || s.tables[uint32(table)] != nil)
	})
}

// Configure installs layout l: new tables are created, and data messages
// are from now on checked against l's epoch.
func (s *Server) Configure(l *layout.Layout) error {
	if err := l.Validate(); err != nil {
		return err
	}
	rm, err := l.Ring()
	if err != nil {
		return fmt.Errorf("server %s: %w", s.opts.ID, err)
	}
	// A server missing from the layout has departed (drained or declared
	// failed): it keeps the map, owns nothing, and so refuses every data
	// request with a code that makes the client re-route.
	me := rm.Index(s.opts.ID)
	// No push is applied while the layout changes, and none after it
	// under the old one (handleData checks): a server never applies a
	// push to a slot it no longer heads.
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range l.Tables {
		if old, ok := s.tables[t.ID]; ok {
			if old.spec != t.Spec {
				return fmt.Errorf("server %s: table %d changed its spec from %+v to %+v", s.opts.ID, t.ID, old.spec, t.Spec)
			}
			continue
		}
		st, err := store.New(t.Spec)
		if err != nil {
			return fmt.Errorf("server %s: table %q: %w", s.opts.ID, t.Spec.Name, err)
		}
		s.tables[t.ID] = &tableState{id: t.ID, spec: t.Spec, store: st}
	}
	ch, err := newChains(l, rm)
	if err != nil {
		return fmt.Errorf("server %s: %w", s.opts.ID, err)
	}
	old := s.chains
	// Before the cluster is ready no server holds state: its layout
	// changes move nothing that a copy would have to make good.
	if old.ring != nil && s.lay.Ready && changed(old, ch) {
		// Epochs are not contiguous (they are etcd revisions): a layout
		// names the epoch it follows.
		c := chainsChange{old: old, cur: ch, gap: ch.ring.Epoch != old.ring.Epoch && l.PrevEpoch != old.ring.Epoch}
		s.changes = append(s.changes, c)
		if c.gap || c.loses(s.opts.ID) {
			s.replMu.Lock()
			for _, r := range s.repl {
				r.cut()
			}
			s.replMu.Unlock()
		}
	}
	s.lay, s.ring, s.me, s.chains = l, rm, me, ch
	s.takeOver(rm, me)
	s.clocks.resize(l.Workers)
	close(s.changed)
	s.changed = make(chan struct{})
	s.dropReplicators(ch)
	// Rebuilds run one after another in layout order: a later one reports a
	// joiner synced only after the earlier ones' copies are acknowledged.
	prev, done := s.lastRebuild, make(chan struct{})
	s.lastRebuild = done
	go func() {
		if prev != nil {
			<-prev
		}
		defer close(done)
		s.rebuild(old, ch)
	}()
	if ck := l.Checkpoint; ck != nil && ck.Seq > s.ckptSeq && me >= 0 {
		s.ckptSeq = ck.Seq
		go s.checkpointTo(*ck)
	}
	if r := l.Resume; r != nil && r.Seq != s.restoredSeq {
		// Loaded once, under the first layout that asks: the slots a
		// server holds only shrink as more servers join, so this is a
		// superset of what it will hold.
		s.restoredSeq = r.Seq
		go s.restoreFrom(*r, ch)
	}
	// Workers that died or left no longer hold the others back.
	for _, r := range l.Finished {
		go s.advanceClock(r, Finished)
	}
	return nil
}

// OnRing reports whether this server is on the ring of its current layout.
func (s *Server) OnRing() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ring != nil && s.me >= 0
}

// Epoch returns the epoch of the current range map, or 0.
func (s *Server) Epoch() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.epochLocked()
}

func (s *Server) epochLocked() uint64 {
	if s.ring == nil {
		return 0
	}
	return s.ring.Epoch
}

// Serve accepts connections on ln until ctx is done or ln fails.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer s.closeConns()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("server %s: accept: %w", s.opts.ID, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(nc)
		}()
	}
}

func (s *Server) closeConns() {
	s.connMu.Lock()
	if !s.closed {
		close(s.done)
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.connMu.Unlock()
	s.clocks.dropWaiters()
	s.replMu.Lock()
	repl := s.repl
	s.repl = map[string]*replicator{}
	s.replMu.Unlock()
	for _, r := range repl {
		r.leave()
	}
}

// conn is the server's state for one client connection.
type conn struct {
	*transport.Conn
	hello      wire.Hello
	gen        uint64 // replica connections: see Server.replicaGen
	cache      map[uint32]cachedKeys
	cacheBytes int
	staged     []staged // replication messages of a round not yet complete
	scratch    []float32
}

type cachedKeys struct {
	epoch uint64
	keys  []uint64
}

func (s *Server) serveConn(nc net.Conn) {
	tc := transport.NewConn(nc, s.opts.MaxPayload)
	s.connMu.Lock()
	if s.closed {
		s.connMu.Unlock()
		tc.Close()
		return
	}
	s.conns[tc] = struct{}{}
	s.connMu.Unlock()
	defer func() {
		s.connMu.Lock()
		delete(s.conns, tc)
		s.connMu.Unlock()
		tc.Close()
	}()
	c := &conn{Conn: tc, cache: make(map[uint32]cachedKeys)}
	h, err := tc.Reader.Next()
	if err == nil && h.Type != wire.THello {
		err = fmt.Errorf("first frame is %v, not hello", h.Type)
	}
	var p []byte
	if err == nil {
		p, err = tc.Reader.Payload(h)
	}
	if err == nil {
		c.hello, err = wire.ParseHello(p)
	}
	if err != nil {
		s.log.Warn("refusing connection", "peer", nc.RemoteAddr(), "err", err)
		return
	}
	if c.hello.Role == wire.RoleReplica {
		s.replicaMu.Lock()
		s.replicaGen[c.hello.Node]++
		c.gen = s.replicaGen[c.hello.Node]
		s.replicaMu.Unlock()
	}
	// One goroutine reads frames while another applies them, so that the
	// socket's next frame arrives while this one is applied; the channel
	// keeps the connection's requests in order.
	frames := make(chan frame, 4)
	go func() {
		defer close(frames)
		for {
			h, err := tc.Reader.Next()
			var buf *[]uint64
			if err == nil {
				buf = getPayload(int(h.Len))
				err = tc.Reader.ReadPayloadInto(h, wire.U64Bytes(*buf)[:h.Len])
			}
			if err != nil {
				if buf != nil {
					putPayload(buf)
				}
				if !errors.Is(err, net.ErrClosed) && tc.Err() == nil && !errors.Is(err, io.EOF) {
					s.stats.errors.Add(1)
					s.log.Warn("dropping connection", "peer", c.hello.Node, "err", err)
				}
				tc.Close()
				return
			}
			frames <- frame{h, buf}
		}
	}()
	for f := range frames {
		s.stats.bytesIn.Add(int64(f.h.Len) + wire.HeaderSize)
		s.handle(c, f.h, wire.U64Bytes(*f.buf)[:f.h.Len])
		putPayload(f.buf)
	}
}

type frame struct {
	h   wire.Header
	buf *[]uint64
}

func (s *Server) handle(c *conn, h wire.Header, p []byte) {
	switch h.Type {
	case wire.TPush, wire.TPull, wire.TPushPull:
		if code, err := s.handleData(c, h, p); err != nil {
			s.replyError(c, h, code, err.Error())
		}
	case wire.TPing:
		var pre [wire.ReplyPrefixSize]byte
		wire.PutReply(&pre, 0)
		c.Send(transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: s.Epoch(), ReqID: h.ReqID}, pre[:])})
	case wire.TReplicate:
		if c.hello.Role != wire.RoleReplica {
			s.replyError(c, h, wire.CodeBadRequest, "replication from a client connection")
			return
		}
		if code, err := s.handleReplicate(c, h, p); err != nil {
			s.replyError(c, h, code, err.Error())
		}
	case wire.TClock:
		if err := s.handleClock(c, h, p); err != nil {
			s.replyError(c, h, wire.CodeBadRequest, err.Error())
		}
	default:
		s.replyError(c, h, wire.CodeBadRequest, fmt.Sprintf("unexpected %v frame", h.Type))
	}
}

func (s *Server) replyError(c *conn, h wire.Header, code wire.Code, msg string) {
	s.stats.errors.Add(1)
	c.Send(transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TError, Epoch: s.Epoch(), ReqID: h.ReqID}, wire.AppendError(nil, code, msg))})
}

func (s *Server) handleClock(c *conn, h wire.Header, p []byte) error {
	m, err := wire.ParseClock(p)
	if err != nil {
		return err
	}
	if int(m.Worker) >= s.workers() {
		// A worker that joined a moment ago: this server may not have the
		// layout that counts it yet.
		s.awaitWorkers(int(m.Worker) + 1)
	}
	if h.Epoch > s.Epoch() {
		// The worker's pushes of the clock it ends went to the heads of a
		// newer layout: learn it first, so that the reads this clock
		// releases here are refused if this server no longer heads their
		// keys (see pull).
		s.awaitLayout(h.Epoch, -1)
	}
	counted, err := s.advanceClock(int(m.Worker), m.Clock)
	if err != nil {
		return err
	}
	s.stats.clocks.Add(1)
	var b [wire.ClockReplySize]byte
	wire.PutClockReply(&b, counted)
	c.Send(transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: s.Epoch(), ReqID: h.ReqID}, b[:])})
	return nil
}

// advanceClock records worker's clock, applies the BSP pushes the new
// minimum releases, and then answers the reads that were waiting for it. It
// returns the clock the worker is counted at (see clocks.advance).
func (s *Server) advanceClock(worker int, v int64) (int64, error) {
	s.clocks.advancing.Lock()
	newMin, counted, ok := s.clocks.advance(worker, v)
	if !ok {
		s.clocks.advancing.Unlock()
		return 0, fmt.Errorf("clock from worker %d, but the layout has %d workers", worker, s.workers())
	}
	var ready []func()
	if newMin > s.clocks.minimum() {
		s.bsp.flush(newMin)
		ready = s.clocks.publish(newMin)
	} else {
		s.clocks.lower(newMin)
	}
	s.clocks.advancing.Unlock()
	for _, run := range ready {
		run()
	}
	return counted, nil
}

func (s *Server) workers() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.workersLocked()
}

func (s *Server) workersLocked() int {
	if s.lay == nil {
		return 0
	}
	return s.lay.Workers
}

// keySet is what a data message addresses: sorted keys, or dense runs.
type keySet struct {
	keys []uint64
	runs [][2]uint64
	n    int // number of keys
}

func (k keySet) clone() keySet {
	return keySet{keys: slices.Clone(k.keys), runs: k.runs, n: k.n}
}

// without returns the keys of k outside the slots of held, and their values.
func (k keySet) without(held keyspace.SlotSet, vals []float32, width int) (keySet, []float32) {
	return k.keep(func(sl uint64) bool { return !held.Contains(sl) }, vals, width)
}

// keep returns the keys of k in the slots that in accepts, and their values.
func (k keySet) keep(in func(slot uint64) bool, vals []float32, width int) (keySet, []float32) {
	var out keySet
	var kept []float32
	if k.runs == nil {
		out.keys = []uint64{}
		for i, key := range k.keys {
			if in(keyspace.Slot(key)) {
				out.keys = append(out.keys, key)
				kept = append(kept, vals[i*width:(i+1)*width]...)
			}
		}
		out.n = len(out.keys)
		return out, kept
	}
	off := 0
	for _, r := range k.runs {
		for lo := r[0]; lo < r[1]; {
			hi := min(r[1], keyspace.SlotStart(keyspace.Slot(lo)+1))
			n := int(hi-lo) * width
			if in(keyspace.Slot(lo)) {
				if m := len(out.runs); m > 0 && out.runs[m-1][1] == lo {
					out.runs[m-1][1] = hi
				} else {
					out.runs = append(out.runs, [2]uint64{lo, hi})
				}
				out.n += int(hi - lo)
				kept = append(kept, vals[off:off+n]...)
			}
			off += n
			lo = hi
		}
	}
	if out.runs == nil {
		out.keys = []uint64{}
	}
	return out, kept
}

func (s *Server) handleData(c *conn, h wire.Header, p []byte) (wire.Code, error) {
	d, err := wire.ParseData(p, h.Type != wire.TPull)
	if err != nil {
		return wire.CodeBadRequest, err
	}
	s.mu.RLock()
	rm, me, t, workers := s.ring, s.me, s.tables[d.Table], s.workersLocked()
	s.mu.RUnlock()
	if rm == nil || h.Epoch > rm.Epoch || t == nil {
		s.awaitLayout(h.Epoch, int64(d.Table))
		s.mu.RLock()
		rm, me, t, workers = s.ring, s.me, s.tables[d.Table], s.workersLocked()
		s.mu.RUnlock()
	}
	switch {
	case rm == nil:
		return wire.CodeNotConfigured, errors.New("server has no layout yet")
	case h.Epoch != rm.Epoch:
		return wire.CodeStaleEpoch, fmt.Errorf("epoch %d, server is at %d", h.Epoch, rm.Epoch)
	case t == nil:
		return wire.CodeUnknownTable, fmt.Errorf("no table %d", d.Table)
	case int(d.Width) != t.spec.Width:
		return wire.CodeBadRequest, fmt.Errorf("table %q has width %d, message says %d", t.spec.Name, t.spec.Width, d.Width)
	}
	if w := int(d.Worker); d.Worker != wire.NoWorker && w >= workers {
		// A worker that joined a moment ago: learn the layout that counts
		// it before its pushes, so that reads wait for its clock.
		s.awaitWorkers(w + 1)
	}
	// A worker's message carries its clock: a server that missed the
	// worker's clock messages (it joined later, or their connection broke)
	// learns it here.
	if w := int(d.Worker); d.Worker != wire.NoWorker && d.Clock > s.clocks.of(w) {
		_, _ = s.advanceClock(w, d.Clock) // a rank beyond the layout: its clock message will say so
	}
	ks, code, err := s.resolveKeys(c, rm, me, &d)
	if err != nil {
		return code, err
	}
	if h.Type == wire.TPull {
		s.pull(c, t, ks, d, h.ReqID, rm.Epoch, 0)
		return 0, nil
	}
	var vals []float32
	if d.Enc == wire.EncRaw {
		vals = wire.BytesF32(d.Vals)
	} else {
		if cap(c.scratch) < d.NumValues() {
			c.scratch = make([]float32, d.NumValues())
		}
		vals = c.scratch[:d.NumValues()]
		if err := wire.DecodeValues(d.Enc, d.Vals, vals); err != nil {
			return wire.CodeBadRequest, err
		}
	}
	s.stats.pushes.Add(1)
	s.stats.keysPushed.Add(int64(ks.n))
	// A part re-sent after a failure may find its effect here already, for
	// all its keys or for the slots whose state came with its pair: those
	// keys are skipped, the rest applied.
	var held scope
	if d.Seq != 0 {
		var wait []chan struct{}
		held, wait = s.dedup.check(c.hello.Client, d.Seq, d.Acked, d.Table, d.Ancestors)
		for _, w := range wait {
			select {
			case <-w:
			case <-s.done:
				return wire.CodeShuttingDown, errors.New("server is shutting down")
			}
		}
	}
	// The state to replicate is that of every key the part names, applied
	// now or before.
	all := ks
	switch {
	case held.all:
		s.stats.duplicates.Add(1)
		ks, vals = keySet{}, nil
	case len(held.slots) > 0:
		s.stats.duplicates.Add(1)
		ks, vals = ks.without(held.slots, vals, t.spec.Width)
	}
	if t.spec.Consistency.Model == table.BSP && d.Worker != wire.NoWorker && d.Clock >= s.clocks.minimum() {
		// Applied, and then replicated, once every worker has finished
		// the clock. It is acknowledged once the other servers of its
		// chains hold it too (workers wait for their pushes before they
		// tick): if this server fails before the clock completes, the
		// next head applies it (docs/design/resilience.md, "BSP").
		all, ks, vals = all.clone(), ks.clone(), slices.Clone(vals)
		client := c.hello.Client
		if s.bsp.add(d.Clock, d.Worker, func() { s.applyDeferred(t, all, ks, vals, client, d.Seq, d.Acked) }) {
			pair := wire.Pair{Client: client, Seq: d.Seq, Acked: d.Acked, Table: t.id}
			var durable chan struct{}
			if d.Seq != 0 {
				durable = s.dedup.deferring(client, d.Seq)
			}
			s.replicateDeferred(t, ks, vals, pair, d.Clock, d.Worker, func(err error) {
				if durable != nil {
					close(durable)
				}
				if err != nil {
					s.replyError(c, h, wire.CodeStaleEpoch, err.Error())
					return
				}
				s.answer(c, h, t, all, d, rm.Epoch, 0)
			})
			return 0, nil
		}
	}
	if h.Type != wire.TPush {
		all = all.clone() // the pull half reads after the replication
	}
	s.applyMu.RLock()
	defer s.applyMu.RUnlock()
	s.mu.RLock()
	moved := s.ring.Epoch != rm.Epoch
	s.mu.RUnlock()
	if moved {
		// The layout changed since the keys were resolved: this server
		// may no longer head them.
		if d.Seq != 0 {
			s.dedup.abandon(c.hello.Client, d.Seq)
		}
		return wire.CodeStaleEpoch, fmt.Errorf("layout changed from epoch %d while the push waited", rm.Epoch)
	}
	refused := s.applyPush(t, ks, vals, c.hello.Client, d.Seq)
	s.replicate(t, all, c.hello.Client, d.Seq, d.Acked, func(err error) {
		if err != nil {
			s.replyError(c, h, wire.CodeStaleEpoch, err.Error())
			return
		}
		s.answer(c, h, t, all, d, rm.Epoch, refused)
	})
	return 0, nil
}

// applyPush applies vals to keys ks of t, records the push (client, seq)
// as applied when seq is not 0, and returns how many keys' updates were
// refused as non-finite. The caller holds applyMu for reading.
func (s *Server) applyPush(t *tableState, ks keySet, vals []float32, client, seq uint64) int {
	refused := 0
	if ks.n > 0 {
		refused = push(t.store, ks, vals, t.spec.Width)
		s.stats.refused.Add(int64(refused))
	}
	if seq != 0 {
		s.dedup.applied(client, seq)
	}
	return refused
}

// applyDeferred applies a BSP push whose clock has completed: the keys of
// ks this server still heads (those whose slots moved meanwhile are their
// new head's to apply), then replicates the state of the keys of all it
// still heads.
func (s *Server) applyDeferred(t *tableState, all, ks keySet, vals []float32, client, seq, acked uint64) {
	s.applyMu.RLock()
	defer s.applyMu.RUnlock()
	heads := s.heads()
	all, _ = all.keep(heads, nil, 0)
	ks, vals = ks.keep(heads, vals, t.spec.Width)
	s.applyPush(t, ks, vals, client, seq)
	s.replicate(t, all, client, seq, acked, nil)
}

// answer acknowledges a push, or answers the pull half of a pushpull.
func (s *Server) answer(c *conn, h wire.Header, t *tableState, ks keySet, d wire.Data, epoch uint64, refused int) {
	if h.Type == wire.TPush {
		var pre [wire.ReplyPrefixSize]byte
		wire.PutReply(&pre, uint32(refused))
		c.Send(transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: epoch, ReqID: h.ReqID}, pre[:])})
		return
	}
	s.pull(c, t, ks, d, h.ReqID, epoch, refused)
}

// replicate ships the state of keys ks, and the pair (client, seq) when seq
// is not 0, to every other server of their chains, and then calls done
// (when not nil) with nil, or with an error if the keys' slots moved to
// another head first.
func (s *Server) replicate(t *tableState, ks keySet, client, seq, acked uint64, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	s.mu.RLock()
	ch := s.chains
	s.mu.RUnlock()
	var groups map[string]*group
	if ch.replicates() {
		groups = ch.groups(t, ks)
	}
	if len(groups) == 0 {
		done(nil)
		return
	}
	var pairs []wire.Pair
	if seq != 0 {
		pairs = []wire.Pair{{Client: client, Seq: seq, Acked: acked, Table: t.id}}
	}
	finish := allDone(len(groups), done)
	for _, g := range groups {
		r := s.replicatorFor(g.peer)
		if r == nil {
			finish(errors.New("server is shutting down"))
			continue
		}
		r.add(entry{items: g.items, pairs: pairs}, finish)
	}
}

// allDone returns a function to call n times, with an error or nil: on
// the nth call it calls done with the first error, or with nil.
func allDone(n int, done func(error)) func(error) {
	var left atomic.Int32
	var failed atomic.Pointer[error]
	left.Store(int32(n))
	return func(err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
		if left.Add(-1) == 0 {
			if e := failed.Load(); e != nil {
				done(*e)
				return
			}
			done(nil)
		}
	}
}

// pull answers a pull (or the pull half of a pushpull) once the table's
// consistency bound allows.
func (s *Server) pull(c *conn, t *tableState, ks keySet, d wire.Data, reqID, epoch uint64, refused int) {
	s.stats.pulls.Add(1)
	s.stats.keysPulled.Add(int64(ks.n))
	need := int64(-1 << 63)
	if b := t.spec.Consistency.Bound(); b >= 0 && d.Worker != wire.NoWorker {
		need = d.Clock - int64(b)
	}
	if need > s.clocks.minimum() {
		// The pull waits for slower workers; the payload buffer it points
		// into is reused by the next frame, so keep a copy of the keys.
		ks = ks.clone()
	}
	s.clocks.when(need, func() {
		if s.Epoch() != epoch {
			// The read waited while the layout changed: the pushes it
			// must see may have gone to the keys' new heads.
			s.replyError(c, wire.Header{ReqID: reqID}, wire.CodeStaleEpoch, fmt.Sprintf("layout changed from epoch %d while the read waited", epoch))
			return
		}
		s.replyValues(c, t, ks, reqID, epoch, refused)
	})
}

// replicatorFor returns the stream to peer, starting it if need be, or nil
// once the server is shutting down: a stopping server must not start
// streams that outlive it.
func (s *Server) replicatorFor(peer ring.Server) *replicator {
	s.connMu.Lock()
	closed := s.closed
	s.connMu.Unlock()
	s.mu.RLock()
	changes := len(s.changes)
	s.mu.RUnlock()
	s.replMu.Lock()
	defer s.replMu.Unlock()
	if closed {
		return nil
	}
	r := s.repl[peer.ID]
	if r == nil || r.peer.Addr != peer.Addr {
		if r != nil {
			go r.leave()
		}
		r = newReplicator(s, peer, changes)
		s.repl[peer.ID] = r
	}
	return r
}

// dropReplicators stops the streams to servers that left the layout and
// releases the pushes that waited for them.
func (s *Server) dropReplicators(ch chains) {
	s.replMu.Lock()
	var gone []*replicator
	for id, r := range s.repl {
		if ch.final.Index(id) < 0 && ch.ring.Index(id) < 0 {
			gone = append(gone, r)
			delete(s.repl, id)
		}
	}
	s.replMu.Unlock()
	// Not here: Configure holds s.mu, which a replicator may be waiting
	// for while it holds its own lock (headsAll), which leave takes.
	for _, r := range gone {
		go r.leave()
	}
}

func (s *Server) resolveKeys(c *conn, rm *ring.Map, me int, d *wire.Data) (keySet, wire.Code, error) {
	switch d.Kind {
	case wire.KeysExplicit, wire.KeysCache:
		if err := keyspace.CheckSorted(d.Keys); err != nil {
			return keySet{}, wire.CodeBadRequest, err
		}
		if err := checkOwned(rm, me, d.Keys); err != nil {
			return keySet{}, wire.CodeNotOwner, err
		}
		if d.Kind == wire.KeysCache {
			c.remember(d.CacheID, rm.Epoch, d.Keys, s.opts.KeyCacheBytes)
		}
		return keySet{keys: d.Keys, n: len(d.Keys)}, 0, nil
	case wire.KeysCached:
		ck, ok := c.cache[d.CacheID]
		if !ok || ck.epoch != rm.Epoch || len(ck.keys) != int(d.Count) {
			return keySet{}, wire.CodeUnknownKeySet, fmt.Errorf("no cached key list %d of %d keys at epoch %d", d.CacheID, d.Count, rm.Epoch)
		}
		return keySet{keys: ck.keys, n: len(ck.keys)}, 0, nil
	case wire.KeysRange:
		var ks keySet
		rm.OwnedRuns(keyspace.Range{Lo: d.Lo, Hi: d.Hi}, me, func(lo, hi uint64) {
			ks.runs = append(ks.runs, [2]uint64{lo, hi})
			ks.n += int(hi - lo)
		})
		if ks.n != int(d.Count) {
			return keySet{}, wire.CodeNotOwner, fmt.Errorf("range [%d,%d): server owns %d keys, message carries %d", d.Lo, d.Hi, ks.n, d.Count)
		}
		return ks, 0, nil
	}
	return keySet{}, wire.CodeBadRequest, fmt.Errorf("key kind %d", d.Kind)
}

func (c *conn) remember(id uint32, epoch uint64, keys []uint64, limit int) {
	if old, ok := c.cache[id]; ok {
		c.cacheBytes -= 8 * len(old.keys)
	}
	if c.cacheBytes+8*len(keys) > limit {
		// Forget everything: the client resends any list it still uses.
		clear(c.cache)
		c.cacheBytes = 0
	}
	c.cache[id] = cachedKeys{epoch: epoch, keys: slices.Clone(keys)}
	c.cacheBytes += 8 * len(keys)
}

func checkOwned(rm *ring.Map, me int, keys []uint64) error {
	last := ^uint64(0)
	for _, k := range keys {
		if sl := keyspace.Slot(k); sl != last {
			if rm.SlotOwner(sl) != me {
				return fmt.Errorf("key %d belongs to server %s at epoch %d", k, rm.Servers[rm.SlotOwner(sl)].ID, rm.Epoch)
			}
			last = sl
		}
	}
	return nil
}

func push(st *store.Table, ks keySet, vals []float32, width int) int {
	if ks.keys != nil || ks.runs == nil {
		return st.Push(ks.keys, vals)
	}
	refused, off := 0, 0
	for _, r := range ks.runs {
		n := int(r[1]-r[0]) * width
		refused += st.PushRun(r[0], vals[off:off+n])
		off += n
	}
	return refused
}

func (s *Server) replyValues(c *conn, t *tableState, ks keySet, reqID, epoch uint64, refused int) {
	w := t.spec.Width
	buf := getBuf(ks.n * w)
	vals := (*buf)[:ks.n*w]
	if ks.runs == nil {
		t.store.Pull(ks.keys, vals)
	} else {
		off := 0
		for _, r := range ks.runs {
			n := int(r[1]-r[0]) * w
			t.store.PullRun(r[0], vals[off:off+n])
			off += n
		}
	}
	var pre [wire.ReplyPrefixSize]byte
	wire.PutReply(&pre, uint32(refused))
	f := wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: epoch, ReqID: reqID}, pre[:], wire.F32Bytes(vals))
	c.Send(transport.Outgoing{Frame: f, Done: func(error) { putBuf(buf) }})
}

// Stats is a snapshot of a server's counters and memory.
type Stats struct {
	Pushes, Pulls, Clocks    int64
	KeysPushed, KeysPulled   int64
	Refused                  int64 `json:"refused_non_finite"`
	BytesIn                  int64
	Errors                   int64
	Keys, Values, StoreBytes int64
	BytesPerValue            float64
	MinClock                 int64
}

// Stats returns the server's counters and what its tables hold.
func (s *Server) Stats() Stats {
	st := Stats{
		Pushes: s.stats.pushes.Load(), Pulls: s.stats.pulls.Load(), Clocks: s.stats.clocks.Load(),
		KeysPushed: s.stats.keysPushed.Load(), KeysPulled: s.stats.keysPulled.Load(),
		Refused: s.stats.refused.Load(), BytesIn: s.stats.bytesIn.Load(), Errors: s.stats.errors.Load(),
		MinClock: s.clocks.minimum(),
	}
	s.mu.RLock()
	for _, t := range s.tables {
		ts := t.store.Stats()
		st.Keys += ts.Keys
		st.Values += ts.Values
		st.StoreBytes += ts.Bytes
	}
	s.mu.RUnlock()
	if st.Values > 0 {
		st.BytesPerValue = float64(st.StoreBytes) / float64(st.Values)
	}
	return st
}
