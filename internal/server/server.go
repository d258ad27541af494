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
	"github.com/terrace-ml/terrace/internal/placement/tier"
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
	// its part of a cluster checkpoint, or loaded its slots from one (for
	// load rewind: layout.Checkpoint.Rewind).
	OnCheckpointed func(seq uint64, err error)
	OnRestored     func(seq uint64, rewind int, err error)
	// Network makes the connections to peer servers (TCP if nil).
	Network transport.Network
	// AckPolicy, when set, gives the acknowledgement policy of the stream
	// to each peer server (AckChain if nil or for every peer it does not
	// name otherwise). Nothing uses AckBulk yet: it is for the reliability
	// tiers' ActivePS, which streams to its BackupPS (issue 11).
	AckPolicy func(peer string) AckPolicy
	// Machine and Class are the machine the server runs on and its class,
	// for its statistics (issue 11).
	Machine string
	Class   tier.Class
	// OnLoss, when set, is told what this server's loss ledger counts
	// after a fallback made it a head (docs/design/tiers.md, "Bulk
	// revocation"), FallbackGrace (DefaultFallbackGrace if 0) after it
	// installed the fallback's layout: the time surviving clients have to
	// re-send the pushes they never heard acknowledged.
	OnLoss        func(LossReport)
	FallbackGrace time.Duration
}

// Server serves its share of every table. Its decisions live in pure
// types without I/O, locks or goroutines (the core: consistency, dedup and
// heldPushes, chains and peerSync, peerQueue); the Server drives them from
// its connection goroutines, its replicators' goroutines and its tasks
// (docs/design/server.md).
//
// Lock order: applyMu, then replicaMu, then mu; applyMu and replicaMu are
// never held together. Every other lock (clockMu, pairMu, replMu, connMu,
// a replicator's mu, the store's stripes) is a leaf: no lock is taken while
// it is held, and no waiter or callback runs under it. Waiters (a push's
// acknowledgement, a parked read) run with no lock held, apart from
// applyMu's read side in a connection goroutine.
type Server struct {
	opts Options
	log  *slog.Logger

	// applyMu is held for reading while a push is applied and queued for
	// replication, and for writing while Configure installs a layout and
	// while a replicator takes a round's entries (replicator.nextRound).
	applyMu sync.RWMutex

	// replicaMu orders replication imports; replicaGen numbers each
	// sender's replica connections, and only the newest may import, so that
	// frames still in flight on a sender's old connection cannot land after
	// newer state sent on its new one.
	replicaMu  sync.Mutex
	replicaGen map[string]uint64

	// mu guards the layout and what derives from it.
	mu     sync.RWMutex
	lay    *layout.Layout
	ring   *ring.Map
	chains chains
	me     int
	tables map[uint32]*tableState
	// changed is closed and replaced whenever Configure installs a layout.
	changed chan struct{}
	// changes lists the chain changes this server has installed (sync.go);
	// appended with applyMu held too.
	changes []chainsChange
	// gen counts the layouts installed that changed the chains (a layout
	// may change only its workers, say): a round planned under one gen is
	// still right under the same gen.
	gen                  uint64
	ckptSeq, restoredSeq uint64
	// restoredRewind is the rewind of the last checkpoint loaded
	// (layout.Checkpoint.Rewind).
	restoredRewind int
	lastRebuild    chan struct{} // closed when the newest rebuild is done
	lastRestore    chan struct{} // closed when the newest load of a checkpoint is done

	// applies counts the pushes that started changing the store, so that
	// a replicator can tell whether any did while it read a round's state
	// (replicator.nextRound).
	applies atomic.Uint64

	// clockMu guards cons, the clocks and BSP deferral.
	clockMu sync.Mutex
	cons    consistency[func(), *bspPush]

	// pairMu guards dedup and held: which pushes this server holds; and
	// ledger, which it does not hold yet (as a BackupPS).
	pairMu sync.Mutex
	dedup  dedup
	held   heldPushes
	ledger ledger

	// replMu guards repl and replStopped.
	replMu      sync.Mutex
	repl        map[string]*replicator // by peer server ID
	replStopped bool

	// connMu guards conns, closed, run and queued.
	connMu sync.Mutex
	conns  map[*transport.Conn]struct{}
	closed bool
	// run is the context of the server's tasks once Serve runs; tasks
	// started before then wait in queued.
	run    context.Context
	queued []func(context.Context)
	// tasks counts the goroutines of the server's tasks and replicators.
	tasks sync.WaitGroup

	// done is closed when the server stops serving.
	done    chan struct{}
	stats   counters
	handoff handoffCounters
	obs     *obs // metrics.go
	// onDurable, when set (by tests), is told of every confirmation a
	// stream takes, with the stream's durability watermark after it.
	onDurable func(peer string, durable uint64)
	// onRoundRead, when set (by tests), runs as a replicator starts reading
	// a round's state.
	onRoundRead func()
	// onCatchUp, when set (by tests), runs as a connection starts waiting
	// for this server to catch up with a layout (catchUp).
	onCatchUp func()
}

type tableState struct {
	id    uint32
	spec  table.Spec
	store *store.Table
	// emptied is set once a rewind replaced this store by an empty one
	// (emptyTablesLocked): its state is rolled back, and no longer sent.
	emptied atomic.Bool
}

type counters struct {
	pushes, pulls, clocks, keysPushed, keysPulled, refused, bytesIn, errors atomic.Int64
	duplicates, replicated, bytesOut, parked                                atomic.Int64
	// pushBytes counts push frames from workers; streamBytes and
	// streamRounds what this server streamed to BackupPS (issue 11).
	pushBytes, streamBytes, streamRounds atomic.Int64
	// ledgerPairs and ledgerBytes count what this server sent to BackupPS
	// ledgers (ledger_stream.go).
	ledgerPairs, ledgerBytes atomic.Int64
	// ledgerLost counts the pushes this server's ledger reported lost.
	ledgerLost atomic.Int64
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
		opts:       o,
		log:        o.Logger.With("server", o.ID),
		tables:     make(map[uint32]*tableState),
		conns:      make(map[*transport.Conn]struct{}),
		changed:    make(chan struct{}),
		done:       make(chan struct{}),
		repl:       make(map[string]*replicator),
		replicaGen: make(map[string]uint64),
		obs:        newObs(),
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
		if s.onCatchUp != nil {
			s.onCatchUp()
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

// target returns what a data message for table is checked against.
func (s *Server) target(table uint32) (rm *ring.Map, me int, t *tableState, workers int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ring, s.me, s.tables[table], s.workersLocked()
}

func (s *Server) chainsNow() chains {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.chains
}

// tableList returns the server's tables.
func (s *Server) tableList() []*tableState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*tableState, 0, len(s.tables))
	for _, t := range s.tables {
		out = append(out, t)
	}
	return out
}

// heads returns whether this server heads a slot under its current layout.
func (s *Server) heads() func(slot uint64) bool {
	s.mu.RLock()
	rm, me := s.ring, s.me
	s.mu.RUnlock()
	return func(sl uint64) bool { return rm != nil && me >= 0 && rm.SlotOwner(sl) == me }
}

// layoutView is the layout as a replicator plans a round under it.
type layoutView struct {
	gen     uint64
	rm      *ring.Map
	me      int
	changes []chainsChange
}

func (s *Server) view() layoutView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return layoutView{gen: s.gen, rm: s.ring, me: s.me, changes: s.changes}
}

// headsEntry reports whether this server heads every slot of e.
func (v layoutView) headsEntry(e entry) bool {
	if v.rm == nil || v.me < 0 {
		return false
	}
	for _, it := range e.items {
		if checkOwned(v.rm, v.me, it.keys) != nil {
			return false
		}
	}
	if d := e.deferred; d != nil && checkOwned(v.rm, v.me, keyspace.KeyList(d.Keys)) != nil {
		return false
	}
	return true
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

// Serve accepts connections on ln until ctx is done or ln fails. It runs
// the server's tasks (rebuilds, checkpoints, restores, replicators) under
// ctx, and returns once every one of them has stopped.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	s.startTasks(ctx)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer s.tasks.Wait()
	defer wg.Wait()
	defer cancel()
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

// spawn runs task in a goroutine of its own once Serve runs, under
// Serve's context; Serve waits for it before it returns.
func (s *Server) spawn(task func(ctx context.Context)) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.closed {
		return
	}
	if s.run == nil {
		s.queued = append(s.queued, task)
		return
	}
	s.tasks.Add(1)
	go func() {
		defer s.tasks.Done()
		task(s.run)
	}()
}

func (s *Server) startTasks(ctx context.Context) {
	s.connMu.Lock()
	s.run = ctx
	queued := s.queued
	s.queued = nil
	s.connMu.Unlock()
	for _, task := range queued {
		s.spawn(task)
	}
}

func (s *Server) closeConns() {
	s.connMu.Lock()
	if !s.closed {
		close(s.done)
	}
	s.closed = true
	conns := make([]*transport.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.connMu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	s.clockMu.Lock()
	s.cons.dropWaiters()
	s.clockMu.Unlock()
	s.replMu.Lock()
	repl := s.repl
	s.repl, s.replStopped = map[string]*replicator{}, true
	s.replMu.Unlock()
	for _, r := range repl {
		r.leave()
	}
}

// replicatorFor returns the stream to peer, starting it if need be, or nil
// once the server is shutting down: a stopping server must not start
// streams that outlive it. A stream it replaces (the peer's address
// changed) is returned too, for the caller to stop once it holds no lock.
func (s *Server) replicatorFor(peer ring.Server) (r, replaced *replicator) {
	s.mu.RLock()
	changes := len(s.changes)
	policy := s.policyOf(peer.ID, s.chains.isBackup(peer.ID))
	s.mu.RUnlock()
	s.replMu.Lock()
	if s.replStopped {
		s.replMu.Unlock()
		return nil, nil
	}
	r = s.repl[peer.ID]
	fresh := r == nil || r.peer.Addr != peer.Addr
	if fresh {
		replaced = r
		r = newReplicator(s, peer, changes, policy)
		s.repl[peer.ID] = r
	}
	s.replMu.Unlock()
	if fresh {
		s.spawn(r.run)
	}
	return r, replaced
}

// policyOf is the policy of the stream to peer: AckBulk to a BackupPS
// (docs/design/tiers.md), else what Options.AckPolicy says.
func (s *Server) policyOf(peer string, backup bool) AckPolicy {
	if backup {
		return AckBulk
	}
	if s.opts.AckPolicy == nil {
		return AckChain
	}
	return s.opts.AckPolicy(peer)
}

// syncInterval is the layout's ActivePS sync interval.
func (s *Server) syncInterval() time.Duration {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.lay == nil {
		return 0
	}
	return s.lay.SyncInterval()
}

// Replication returns the durability watermark of the stream to peer and
// the last sequence number queued on it (see AckBulk), or false if there
// is no stream to peer.
func (s *Server) Replication(peer string) (durable, queued uint64, ok bool) {
	s.replMu.Lock()
	r := s.repl[peer]
	s.replMu.Unlock()
	if r == nil {
		return 0, 0, false
	}
	durable, queued = r.durable()
	return durable, queued, true
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
	ranges     rangeCache
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
	// A peer that connects and says nothing is dropped, not kept forever.
	nc.SetReadDeadline(time.Now().Add(helloTimeout))
	if err := s.greet(c); err != nil {
		if errors.Is(err, io.EOF) {
			// Closed before its first byte: a TCP health check, or a
			// client that gave up before its hello (a worker whose data
			// failed to parse), nothing to warn of.
			s.log.Debug("refusing connection", "peer", nc.RemoteAddr(), "err", err)
			return
		}
		s.log.Warn("refusing connection", "peer", nc.RemoteAddr(), "err", err)
		return
	}
	nc.SetReadDeadline(time.Time{})
	// One goroutine reads frames while this one applies them, so that the
	// socket's next frame arrives while this one is applied; the channel
	// keeps the connection's requests in order.
	frames := make(chan frame, 4)
	var reader sync.WaitGroup
	reader.Add(1)
	go func() {
		defer reader.Done()
		s.readFrames(c, frames)
	}()
	for f := range frames {
		s.stats.bytesIn.Add(int64(f.h.Len) + wire.HeaderSize)
		start := time.Now()
		if f.h.Type == wire.TPush {
			s.stats.pushBytes.Add(int64(f.h.Len) + wire.HeaderSize)
		}
		s.handle(c, f.h, wire.U64Bytes(*f.buf)[:f.h.Len])
		s.obs.handled(f.h.Type, start)
		putPayload(f.buf)
	}
	reader.Wait()
}

// helloTimeout bounds the wait for a connection's hello (and, under TLS,
// its handshake); maxHello bounds its size, so that a stranger's first
// frame cannot make the server allocate a data frame's worth.
const (
	helloTimeout = 10 * time.Second
	maxHello     = 4 << 10
)

// greet reads the connection's hello.
func (s *Server) greet(c *conn) error {
	h, err := c.Reader.Next()
	if err == nil && h.Type != wire.THello {
		err = fmt.Errorf("first frame is %v, not hello", h.Type)
	}
	if err == nil && h.Len > maxHello {
		err = fmt.Errorf("hello of %d bytes (at most %d)", h.Len, maxHello)
	}
	var p []byte
	if err == nil {
		p, err = c.Reader.Payload(h)
	}
	if err == nil {
		c.hello, err = wire.ParseHello(p)
	}
	if err != nil {
		return err
	}
	if c.hello.Role == wire.RoleReplica {
		s.replicaMu.Lock()
		s.replicaGen[c.hello.Node]++
		c.gen = s.replicaGen[c.hello.Node]
		s.replicaMu.Unlock()
	}
	return nil
}

// readFrames reads c's frames into frames until the connection fails.
func (s *Server) readFrames(c *conn, frames chan<- frame) {
	defer close(frames)
	for {
		h, err := c.Reader.Next()
		var buf *[]uint64
		if err == nil {
			buf = getPayload(int(h.Len))
			err = c.Reader.ReadPayloadInto(h, wire.U64Bytes(*buf)[:h.Len])
		}
		if err != nil {
			if buf != nil {
				putPayload(buf)
			}
			if !errors.Is(err, net.ErrClosed) && c.Err() == nil && !errors.Is(err, io.EOF) {
				s.stats.errors.Add(1)
				s.log.Warn("dropping connection", "peer", c.hello.Node, "err", err)
			}
			c.Close()
			return
		}
		frames <- frame{h, buf}
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
		s.send(c, transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: s.Epoch(), ReqID: h.ReqID}, wire.PingReply(s.opts.ID))})
	case wire.TReplicate:
		if c.hello.Role != wire.RoleReplica {
			s.replyError(c, h, wire.CodeBadRequest, "replication from a client connection")
			return
		}
		if code, err := s.handleReplicate(c, h, p); err != nil {
			s.replyError(c, h, code, err.Error())
		}
	case wire.TLedger:
		if c.hello.Role != wire.RoleLedger {
			s.replyError(c, h, wire.CodeBadRequest, "ledger pairs on a connection not opened for them")
			return
		}
		if code, err := s.handleLedger(c, h, p); err != nil {
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
	s.obs.refusedFor(code)
	s.send(c, transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TError, Epoch: s.Epoch(), ReqID: h.ReqID}, wire.AppendError(nil, code, msg))})
}

func (s *Server) replyOK(c *conn, reqID, epoch uint64) {
	var pre [wire.ReplyPrefixSize]byte
	wire.PutReply(&pre, 0)
	s.send(c, transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: epoch, ReqID: reqID}, pre[:])})
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
		// keys (see read).
		s.awaitLayout(h.Epoch, -1)
	}
	counted, err := s.advanceClock(int(m.Worker), m.Clock)
	if err != nil {
		return err
	}
	s.stats.clocks.Add(1)
	var b [wire.ClockReplySize]byte
	wire.PutClockReply(&b, counted)
	s.send(c, transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: s.Epoch(), ReqID: h.ReqID}, b[:])})
	return nil
}

// advanceClock records worker's clock and drives the flush it calls for:
// it applies the BSP pushes the new minimum releases, then publishes the
// minimum and answers the reads that were waiting for it. It returns the
// clock the worker is counted at, or, for a worker that enters, the clock
// it must start at (see consistency.advance).
func (s *Server) advanceClock(worker int, v int64) (int64, error) {
	s.clockMu.Lock()
	_, starts, f, ok := s.cons.advance(worker, v)
	s.clockMu.Unlock()
	if !ok {
		return 0, fmt.Errorf("clock from worker %d, but the layout has %d workers", worker, s.workers())
	}
	for f != nil {
		for _, p := range f.due {
			s.applyDeferred(p)
		}
		s.clockMu.Lock()
		ready, next := s.cons.flushed(f)
		s.clockMu.Unlock()
		for _, run := range ready {
			run()
		}
		f = next
	}
	return starts, nil
}

// clockOf returns worker's clock as this server counts it.
func (s *Server) clockOf(worker int) int64 {
	s.clockMu.Lock()
	defer s.clockMu.Unlock()
	return s.cons.of(worker)
}

// minClock returns the minimum clock that reads see.
func (s *Server) minClock() int64 {
	s.clockMu.Lock()
	defer s.clockMu.Unlock()
	return s.cons.min
}

// Stats is a snapshot of a server's counters and memory.
type Stats struct {
	Pushes        int64   `json:"pushes"`
	Pulls         int64   `json:"pulls"`
	Clocks        int64   `json:"clocks"`
	KeysPushed    int64   `json:"keys_pushed"`
	KeysPulled    int64   `json:"keys_pulled"`
	Refused       int64   `json:"refused_non_finite"`
	BytesIn       int64   `json:"bytes_in"`
	Errors        int64   `json:"errors"`
	Keys          int64   `json:"keys"`
	Values        int64   `json:"values"`
	StoreBytes    int64   `json:"store_bytes"`
	BytesPerValue float64 `json:"bytes_per_value"`
	// MinClock is the slowest worker's clock; math.MaxInt64 while no
	// worker counts, which the JSON form leaves out (stats_json.go).
	MinClock int64 `json:"min_clock"`
	// Tiers (issue 11): the machine and class the server runs on, its role
	// in the layout (server, activeps, backupps, standby, joining,
	// departed), the bytes of pushes from workers, and what it streamed to
	// BackupPS.
	Machine      string     `json:"machine,omitempty"`
	Class        tier.Class `json:"class"`
	Role         string     `json:"role,omitempty"`
	PushBytes    int64      `json:"push_bytes"`
	StreamBytes  int64      `json:"stream_bytes"`
	StreamRounds int64      `json:"stream_rounds"`
	// LedgerPairs and LedgerBytes are what it sent to BackupPS loss
	// ledgers; LedgerLost what its own ledger counted lost at fallbacks.
	LedgerPairs int64 `json:"ledger_pairs"`
	LedgerBytes int64 `json:"ledger_bytes"`
	LedgerLost  int64 `json:"ledger_lost"`
}

// Stats returns the server's counters and what its tables hold.
func (s *Server) Stats() Stats {
	st := Stats{
		Pushes: s.stats.pushes.Load(), Pulls: s.stats.pulls.Load(), Clocks: s.stats.clocks.Load(),
		KeysPushed: s.stats.keysPushed.Load(), KeysPulled: s.stats.keysPulled.Load(),
		Refused: s.stats.refused.Load(), BytesIn: s.stats.bytesIn.Load(), Errors: s.stats.errors.Load(),
		MinClock: s.minClock(),
		Machine:  s.opts.Machine, Class: s.opts.Class, Role: s.Role(),
		PushBytes: s.stats.pushBytes.Load(), StreamBytes: s.stats.streamBytes.Load(), StreamRounds: s.stats.streamRounds.Load(),
		LedgerPairs: s.stats.ledgerPairs.Load(), LedgerBytes: s.stats.ledgerBytes.Load(), LedgerLost: s.stats.ledgerLost.Load(),
	}
	for _, t := range s.tableList() {
		ts := t.store.Stats()
		st.Keys += ts.Keys
		st.Values += ts.Values
		st.StoreBytes += ts.Bytes
	}
	if st.Values > 0 {
		st.BytesPerValue = float64(st.StoreBytes) / float64(st.Values)
	}
	return st
}

// Role names what the layout makes this server (issue 11): "server" on
// the ring of stage 1, "activeps" on the ring of stages 2 and 3,
// "backupps", "standby", "joining", or "departed".
func (s *Server) Role() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l := s.lay
	switch {
	case l == nil:
		return ""
	case s.me >= 0 && l.CurrentStage() > tier.Stage1:
		return "activeps"
	case s.me >= 0:
		return "server"
	case l.IsBackup(s.opts.ID):
		return "backupps"
	case slices.ContainsFunc(l.Standby, func(x ring.Server) bool { return x.ID == s.opts.ID }):
		return "standby"
	case slices.ContainsFunc(l.Joining, func(x ring.Server) bool { return x.ID == s.opts.ID }):
		return "joining"
	}
	return "departed"
}
