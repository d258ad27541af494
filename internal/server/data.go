package server

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/storage/store"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

// errShuttingDown fails what a stopping server can no longer do.
var errShuttingDown = errors.New("server is shutting down")

// request is a data message resolved against the server's layout.
type request struct {
	h     wire.Header
	d     wire.Data
	t     *tableState
	epoch uint64
	ks    keyspace.Keys
}

// handleData serves a push, pull or pushpull: it resolves the message
// against the layout, and hands a pull to the consistency gate, a BSP push
// to deferral, and any other push to applyPush.
func (s *Server) handleData(c *conn, h wire.Header, p []byte) (wire.Code, error) {
	d, err := wire.ParseData(p, h.Type != wire.TPull)
	if err != nil {
		return wire.CodeBadRequest, err
	}
	rq, code, err := s.resolve(c, h, d)
	if err != nil {
		return code, err
	}
	if h.Type == wire.TPull {
		s.pull(c, rq, 0)
		return 0, nil
	}
	vals, err := c.values(&rq.d)
	if err != nil {
		return wire.CodeBadRequest, err
	}
	s.stats.pushes.Add(1)
	s.stats.keysPushed.Add(int64(rq.ks.Len()))
	// A part re-sent after a failure may find its effect here already, for
	// all its keys or for the slots whose state came with its pair: those
	// keys are skipped, the rest applied. The state to replicate is that
	// of every key the part names, applied now or before.
	all := rq.ks
	ks, vals, code, err := s.skipHeld(c, rq, vals)
	if err != nil {
		return code, err
	}
	if rq.t.spec.Consistency.Model == table.BSP && d.Worker != wire.NoWorker && s.deferBSP(c, rq, all, ks, vals) {
		return 0, nil
	}
	return s.applyNow(c, rq, all, ks, vals)
}

// resolve checks a data message against the layout (waiting a moment for
// a layout or table the client knows of already), learns the worker's
// clock from it, and resolves its keys.
func (s *Server) resolve(c *conn, h wire.Header, d wire.Data) (request, wire.Code, error) {
	rm, me, t, workers := s.target(d.Table)
	if rm == nil || h.Epoch > rm.Epoch || t == nil {
		s.awaitLayout(h.Epoch, int64(d.Table))
		rm, me, t, workers = s.target(d.Table)
	}
	switch {
	case rm == nil:
		return request{}, wire.CodeNotConfigured, errors.New("server has no layout yet")
	case h.Epoch != rm.Epoch:
		return request{}, wire.CodeStaleEpoch, fmt.Errorf("epoch %d, server is at %d", h.Epoch, rm.Epoch)
	case t == nil:
		return request{}, wire.CodeUnknownTable, fmt.Errorf("no table %d", d.Table)
	case int(d.Width) != t.spec.Width:
		return request{}, wire.CodeBadRequest, fmt.Errorf("table %q has width %d, message says %d", t.spec.Name, t.spec.Width, d.Width)
	}
	if w := int(d.Worker); d.Worker != wire.NoWorker {
		if w >= workers {
			// A worker that joined a moment ago: learn the layout that
			// counts it before its pushes, so that reads wait for its clock.
			s.awaitWorkers(w + 1)
		}
		// A worker's message carries its clock: a server that missed the
		// worker's clock messages (it joined later, or their connection
		// broke) learns it here.
		if d.Clock > s.clockOf(w) {
			_, _ = s.advanceClock(w, d.Clock) // a rank beyond the layout: its clock message will say so
		}
	}
	ks, code, err := s.resolveKeys(c, rm, me, &d)
	if err != nil {
		return request{}, code, err
	}
	return request{h: h, d: d, t: t, epoch: rm.Epoch, ks: ks}, 0, nil
}

// values returns a push's values, decoded into the connection's scratch
// space if they are encoded.
func (c *conn) values(d *wire.Data) ([]float32, error) {
	if d.Enc == wire.EncRaw {
		return wire.BytesF32(d.Vals), nil
	}
	if cap(c.scratch) < d.NumValues() {
		c.scratch = make([]float32, d.NumValues())
	}
	vals := c.scratch[:d.NumValues()]
	return vals, wire.DecodeValues(d.Enc, d.Vals, vals)
}

// skipHeld records the push's pair as being applied and returns its keys
// and values less those whose effect this server holds already (by the
// pair's or an ancestor's scope), once those pushes are applied.
func (s *Server) skipHeld(c *conn, rq request, vals []float32) (keyspace.Keys, []float32, wire.Code, error) {
	if rq.d.Seq == 0 {
		return rq.ks, vals, 0, nil
	}
	s.pairMu.Lock()
	held, wait := s.dedup.check(c.hello.Client, rq.d.Seq, rq.d.Acked, rq.d.Table, rq.d.Ancestors)
	s.ledger.resent(c.hello.Client, rq.d.Seq, rq.d.Ancestors)
	s.pairMu.Unlock()
	for _, w := range wait {
		select {
		case <-w:
		case <-s.done:
			return keyspace.Keys{}, nil, wire.CodeShuttingDown, errShuttingDown
		}
	}
	switch {
	case held.all:
		s.stats.duplicates.Add(1)
		return keyspace.Keys{}, nil, 0, nil
	case len(held.slots) > 0:
		s.stats.duplicates.Add(1)
		ks, vals := keep(rq.ks, func(sl uint64) bool { return !held.slots.Contains(sl) }, vals, rq.t.spec.Width)
		return ks, vals, 0, nil
	}
	return rq.ks, vals, 0, nil
}

// deferBSP holds a BSP push until every worker has finished its clock, and
// reports false if that clock has completed (the caller applies it now).
// It is acknowledged once the other servers of its chains hold it too
// (workers wait for their pushes before they tick): if this server fails
// before the clock completes, the next head applies it
// (docs/design/resilience.md, "BSP").
func (s *Server) deferBSP(c *conn, rq request, all, ks keyspace.Keys, vals []float32) bool {
	client := c.hello.Client
	p := &bspPush{t: rq.t, all: all.Clone(), ks: ks.Clone(), vals: slices.Clone(vals),
		pair: wire.Pair{Client: client, Seq: rq.d.Seq, Acked: rq.d.Acked, Table: rq.t.id}}
	s.clockMu.Lock()
	deferred := s.cons.deferPush(rq.d.Clock, rq.d.Worker, p)
	s.clockMu.Unlock()
	if !deferred {
		return false
	}
	var durable chan struct{}
	if rq.d.Seq != 0 {
		s.pairMu.Lock()
		durable = s.dedup.deferring(client, rq.d.Seq)
		s.pairMu.Unlock()
	}
	s.replicateDeferred(*p, rq.d.Clock, rq.d.Worker, func(err error) {
		if durable != nil {
			close(durable)
		}
		if err != nil {
			s.replyError(c, rq.h, wire.CodeStaleEpoch, err.Error())
			return
		}
		rq.ks = p.all
		s.answer(c, rq, 0)
	})
	return true
}

// applyNow applies a push and replicates the state of every key it names;
// it is acknowledged (or its pull half answered) once the other servers of
// its chains hold that state.
func (s *Server) applyNow(c *conn, rq request, all, ks keyspace.Keys, vals []float32) (wire.Code, error) {
	if rq.h.Type != wire.TPush {
		all = all.Clone() // the pull half reads after the replication
	}
	s.applyMu.RLock()
	if s.Epoch() != rq.epoch {
		s.applyMu.RUnlock()
		// The layout changed since the keys were resolved: this server
		// may no longer head them.
		if rq.d.Seq != 0 {
			s.pairMu.Lock()
			s.dedup.abandon(c.hello.Client, rq.d.Seq)
			s.pairMu.Unlock()
		}
		return wire.CodeStaleEpoch, fmt.Errorf("layout changed from epoch %d while the push waited", rq.epoch)
	}
	refused := s.applyPush(rq.t, ks, vals, c.hello.Client, rq.d.Seq)
	rq.ks = all
	pair := wire.Pair{Client: c.hello.Client, Seq: rq.d.Seq, Acked: rq.d.Acked, Table: rq.t.id}
	after := s.replicateAs(rq.t, all, pair, rq.d.Worker, rq.d.Ancestors, func(err error) {
		if err != nil {
			s.replyError(c, rq.h, wire.CodeStaleEpoch, err.Error())
			return
		}
		s.answer(c, rq, refused)
	})
	s.applyMu.RUnlock()
	if after == nil {
		s.answer(c, rq, refused)
		return 0, nil
	}
	after()
	return 0, nil
}

// applyPush applies vals to keys ks of t, records the push (client, seq)
// as applied when seq is not 0, and returns how many keys' updates were
// refused as non-finite. The caller holds applyMu for reading.
func (s *Server) applyPush(t *tableState, ks keyspace.Keys, vals []float32, client, seq uint64) int {
	refused := 0
	if ks.Len() > 0 {
		s.applies.Add(1) // before the store changes: see nextRound
		refused = push(t.store, ks, vals, t.spec.Width)
		s.stats.refused.Add(int64(refused))
	}
	if seq != 0 {
		s.pairMu.Lock()
		s.dedup.applied(client, seq)
		s.pairMu.Unlock()
	}
	return refused
}

// applyDeferred applies a BSP push whose clock has completed: the keys
// this server still heads (those whose slots moved meanwhile are their new
// head's to apply), then replicates the state of the keys of all it still
// heads. The caller holds no lock.
func (s *Server) applyDeferred(p *bspPush) {
	s.applyMu.RLock()
	ks, vals := keep(p.ks, s.heads(), p.vals, p.t.spec.Width)
	s.applyPush(p.t, ks, vals, p.pair.Client, p.pair.Seq)
	after := s.replicateHeaded(p)
	s.applyMu.RUnlock()
	if after != nil {
		after()
	}
}

// replicateApplied replicates the state of the keys of BSP push p that
// this server heads, once install applied it. The caller holds no lock.
func (s *Server) replicateApplied(p *bspPush) {
	s.applyMu.RLock()
	after := s.replicateHeaded(p)
	s.applyMu.RUnlock()
	if after != nil {
		after()
	}
}

func (s *Server) replicateHeaded(p *bspPush) (after func()) {
	all, _ := keep(p.all, s.heads(), nil, 0)
	return s.replicate(p.t, all, p.pair, func(error) {})
}

// answer acknowledges a push, or answers the pull half of a pushpull.
func (s *Server) answer(c *conn, rq request, refused int) {
	if rq.h.Type == wire.TPush {
		var pre [wire.ReplyPrefixSize]byte
		wire.PutReply(&pre, uint32(refused))
		s.send(c, transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: rq.epoch, ReqID: rq.h.ReqID}, pre[:])})
		return
	}
	s.pull(c, rq, refused)
}

// replicate queues the state of keys ks, and the pair when its seq is not
// 0, for every other server of their chains; done is called with nil once
// all hold it, or with an error if the keys' slots moved to another head
// first. The caller holds applyMu for reading (see nextRound). replicate
// returns nil if no other server must hold the keys (the caller is done
// at once), or a function the caller must call once it has released
// applyMu.
func (s *Server) replicate(t *tableState, ks keyspace.Keys, pair wire.Pair, done waiter) (after func()) {
	return s.replicateAs(t, ks, pair, wire.NoWorker, nil, done)
}

// replicateAs is replicate for a push of worker (wire.NoWorker if none),
// whom a BackupPS's ledger names, re-sending the pushes ancestors.
func (s *Server) replicateAs(t *tableState, ks keyspace.Keys, pair wire.Pair, worker uint32, ancestors []uint64, done waiter) (after func()) {
	ch := s.chainsNow()
	if !ch.replicates() {
		return nil
	}
	groups := ch.groups(t, ks)
	if len(groups) == 0 {
		return nil
	}
	var pairs []wire.Pair
	var ledgers []ring.Server
	waits := len(groups) + 1
	if pair.Seq != 0 {
		pairs = []wire.Pair{pair}
		for _, g := range groups {
			if ch.isBackup(g.peer.ID) {
				waits++ // its ledger too
				ledgers = append(ledgers, g.peer)
			}
		}
		done = s.retractOnFailure(done, pair, ledgers)
	}
	// One more than the groups and ledgers: the last is the caller's, once
	// it holds no lock, so that done never runs under applyMu.
	finish := allDone(waits, done)
	var now []waiter
	var replaced []*replicator
	for _, g := range groups {
		toLedger := pair.Seq != 0 && ch.isBackup(g.peer.ID)
		r, old := s.replicatorFor(g.peer)
		if old != nil {
			replaced = append(replaced, old)
		}
		if r == nil {
			now = append(now, func(error) { finish(errShuttingDown) })
			if toLedger {
				now = append(now, func(error) { finish(errShuttingDown) })
			}
			continue
		}
		if w := r.add(entry{items: g.items, pairs: pairs}, finish); w != nil {
			now = append(now, w)
		}
		// A BackupPS's ledger learns the push before it is acknowledged,
		// in parallel with the chain (docs/design/tiers.md, "The
		// stream", 5).
		if toLedger {
			if w := r.addLedger(finish, ledgerPairs(pair, g.items, worker, ancestors)...); w != nil {
				now = append(now, w)
			}
		}
	}
	return func() {
		for _, r := range replaced {
			r.leave()
		}
		for _, w := range now {
			w(nil)
		}
		finish(nil)
	}
}

// queue queues e for peer with its waiter; the caller holds no lock.
func (s *Server) queue(peer ring.Server, e entry, w waiter) {
	if r := s.liveReplicator(peer, w); r != nil {
		if now := r.add(e, w); now != nil {
			now(nil)
		}
	}
}

// liveReplicator returns peer's replicator, retiring one it replaced; it
// fails w and returns nil when the server is shutting down.
func (s *Server) liveReplicator(peer ring.Server, w waiter) *replicator {
	r, old := s.replicatorFor(peer)
	if old != nil {
		old.leave()
	}
	if r == nil {
		w(errShuttingDown)
	}
	return r
}

// allDone returns a function to call n times, with an error or nil: on
// the nth call it calls done with the first error, or with nil.
func allDone(n int, done waiter) waiter {
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
func (s *Server) pull(c *conn, rq request, refused int) {
	s.stats.pulls.Add(1)
	s.stats.keysPulled.Add(int64(rq.ks.Len()))
	need := int64(-1 << 63)
	if b := rq.t.spec.Consistency.Bound(); b >= 0 && rq.d.Worker != wire.NoWorker {
		need = rq.d.Clock - int64(b)
	}
	s.clockMu.Lock()
	if need <= s.cons.min {
		s.clockMu.Unlock()
		s.read(c, rq, refused)
		return
	}
	// The pull waits for slower workers; the payload buffer it points into
	// is reused by the next frame, so keep a copy of the keys.
	rq.ks = rq.ks.Clone()
	s.stats.parked.Add(1)
	s.cons.park(need, func() { s.read(c, rq, refused) })
	s.clockMu.Unlock()
}

// read answers a read whose consistency bound is met.
func (s *Server) read(c *conn, rq request, refused int) {
	if s.Epoch() != rq.epoch {
		// The read waited while the layout changed: the pushes it must
		// see may have gone to the keys' new heads.
		s.replyError(c, wire.Header{ReqID: rq.h.ReqID}, wire.CodeStaleEpoch, fmt.Sprintf("layout changed from epoch %d while the read waited", rq.epoch))
		return
	}
	s.replyValues(c, rq.t, rq.ks, rq.h.ReqID, rq.epoch, refused)
}

func (s *Server) resolveKeys(c *conn, rm *ring.Map, me int, d *wire.Data) (keyspace.Keys, wire.Code, error) {
	switch d.Kind {
	case wire.KeysExplicit, wire.KeysCache:
		if err := keyspace.CheckSorted(d.Keys); err != nil {
			return keyspace.Keys{}, wire.CodeBadRequest, err
		}
		ks := keyspace.KeyList(d.Keys)
		if err := checkOwned(rm, me, ks); err != nil {
			return keyspace.Keys{}, wire.CodeNotOwner, err
		}
		if d.Kind == wire.KeysCache {
			c.remember(d.CacheID, rm.Epoch, d.Keys, s.opts.KeyCacheBytes)
		}
		return ks, 0, nil
	case wire.KeysCached:
		ck, ok := c.cache[d.CacheID]
		if !ok || ck.epoch != rm.Epoch || len(ck.keys) != int(d.Count) {
			return keyspace.Keys{}, wire.CodeUnknownKeySet, fmt.Errorf("no cached key list %d of %d keys at epoch %d", d.CacheID, d.Count, rm.Epoch)
		}
		return keyspace.KeyList(ck.keys), 0, nil
	case wire.KeysRange:
		ks := c.ranges.resolve(rm, me, keyspace.Range{Lo: d.Lo, Hi: d.Hi})
		if ks.Len() != int(d.Count) {
			return keyspace.Keys{}, wire.CodeNotOwner, fmt.Errorf("range [%d,%d): server owns %d keys, message carries %d", d.Lo, d.Hi, ks.Len(), d.Count)
		}
		return ks, 0, nil
	}
	return keyspace.Keys{}, wire.CodeBadRequest, fmt.Errorf("key kind %d", d.Kind)
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

// checkOwned returns an error unless server me heads every slot of ks.
func checkOwned(rm *ring.Map, me int, ks keyspace.Keys) error {
	if len(rm.Servers) == 1 && me == 0 {
		// The only server heads every slot: walking a list of 10,000
		// random keys slot by slot cost a tenth of a sparse push.
		return nil
	}
	for sp := range ks.Spans() {
		if o := rm.SlotOwner(sp.Slot); o != me {
			return fmt.Errorf("key %d belongs to server %s at epoch %d", sp.Key(0), rm.Servers[o].ID, rm.Epoch)
		}
	}
	return nil
}

func push(st *store.Table, ks keyspace.Keys, vals []float32, width int) int {
	if !ks.IsRuns() {
		return st.Push(ks.List(), vals)
	}
	return st.PushRuns(ks.Runs(), vals)
}

func (s *Server) replyValues(c *conn, t *tableState, ks keyspace.Keys, reqID, epoch uint64, refused int) {
	if replyPinned(c, t.store, ks, reqID, epoch, refused) {
		return
	}
	w := t.spec.Width
	buf := getBuf(ks.Len() * w)
	vals := (*buf)[:ks.Len()*w]
	if !ks.IsRuns() {
		t.store.Pull(ks.List(), vals)
	} else {
		t.store.PullRuns(ks.Runs(), vals)
	}
	var pre [wire.ReplyPrefixSize]byte
	wire.PutReply(&pre, uint32(refused))
	f := wire.NewFrameOn(wire.Header{Type: wire.TReply, Epoch: epoch, ReqID: reqID}, c.Authenticated(), pre[:], wire.F32Bytes(vals))
	s.send(c, transport.Outgoing{Frame: f, Done: func(error) { putBuf(buf) }})
}
