package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
)

// replicator streams the state of keys this server heads to one other
// server of their chains. It reads the state when it sends, not when the
// push was applied, so a later push to the same key always ships a newer
// state, and several pushes to one key between two sends ship it once: the
// head aggregates before it replicates.
type replicator struct {
	s    *Server
	peer ring.Server

	mu      sync.Mutex
	pending []entry
	waiters []func(error)
	held    []batch // sent but not acknowledged, re-sent after a reconnect
	// bulk holds copies for new chain members, sent a chunk at a time
	// alongside the pushes: a copy reads the state when it is sent, so
	// letting pushes overtake it loses nothing, and pushes do not queue
	// behind a hundred megabytes of copies.
	bulk []batch
	gone bool // the peer left the layout: release everything
	// sync says which slots the peer holds in step with this server
	// (sync.go); used under the server's applyMu write side.
	sync syncState
	kick chan struct{}
	stop chan struct{}
}

// dirty names keys whose state must reach the peer: sorted keys, or n keys from lo.
type dirty struct {
	t    *tableState
	keys []uint64
	lo   uint64
	n    int
}

// entry is keys whose state must reach the peer and the pushes whose
// effect that state carries (the peer holds them for the slots of the state
// it receives), or a full copy of slots (see slotCopy and sync.go).
type entry struct {
	items []dirty
	pairs []wire.Pair
	copy  *slotCopy
	// deferred is a BSP push for the peer to hold (see bsp.go); it carries
	// no state.
	deferred *wire.Deferred
}

type batch struct {
	entries []entry
	waiters []func(error)
	// checked: the copies its entries need are in it (copiesFirst).
	checked bool
	// stale: its entries were queued before this server stopped heading
	// some slots; they may be of an earlier term as head, so they are
	// failed rather than sent (the clients re-send, and pairs tell).
	stale bool
}

// errMoved fails pushes whose slots this server stopped heading before
// their replication was confirmed: the client re-sends them to the new
// head, which holds them or not, and its pairs say which.
var errMoved = errors.New("slots moved to another head before replication completed")

// newReplicator starts a stream to peer; changes is how many chain changes
// the server had seen.
func newReplicator(s *Server, peer ring.Server, changes int) *replicator {
	r := &replicator{s: s, peer: peer, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	r.sync.born, r.sync.bornSynced = changes, changes == 0
	go r.loop()
	return r
}

// add queues e, and a function to run once the peer has it (nil), or has
// left the layout (nil), or its slots moved away (errMoved).
func (r *replicator) add(e entry, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	r.mu.Lock()
	if r.gone {
		r.mu.Unlock()
		done(nil)
		return
	}
	r.pending = append(r.pending, e)
	r.waiters = append(r.waiters, done)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// addBulk queues a copy chunk (see bulk).
func (r *replicator) addBulk(c *slotCopy, done func(error)) {
	r.mu.Lock()
	if r.gone {
		r.mu.Unlock()
		done(nil)
		return
	}
	r.bulk = append(r.bulk, batch{entries: []entry{{copy: c}}, waiters: []func(error){done}})
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// cut marks the pushes queued as stale (see batch.stale): called, under
// the server's applyMu, when a layout change may have taken slots from it.
// Copies are read when sent, and deferred BSP pushes carry no state, so
// neither is ever stale (failing a deferred push would have its client
// re-send it here, where it would wait for its own clock to complete).
func (r *replicator) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, b := range r.held {
		for _, e := range b.entries {
			if e.copy == nil && e.deferred == nil {
				r.held[i].stale = true
				break
			}
		}
	}
	if len(r.pending) == 0 && len(r.waiters) == 0 {
		return
	}
	// Every pending entry has its waiter (add), in the same order.
	var stale, keep batch
	stale.stale = true
	for i, e := range r.pending {
		b := &stale
		if e.deferred != nil {
			b = &keep
		}
		b.entries = append(b.entries, e)
		b.waiters = append(b.waiters, r.waiters[i])
	}
	for _, b := range []batch{stale, keep} {
		if len(b.entries) > 0 {
			r.held = append(r.held, b)
		}
	}
	r.pending, r.waiters = nil, nil
}

// leave releases every waiter: the peer is no longer in the layout, so
// pushes stop waiting for it (as Kafka's in-sync replica set shrinks).
func (r *replicator) leave() {
	r.mu.Lock()
	r.gone = true
	var release []func(error)
	for _, b := range append(r.held, r.bulk...) {
		release = append(release, b.waiters...)
	}
	release = append(release, r.waiters...)
	r.held, r.bulk, r.pending, r.waiters = nil, nil, nil, nil
	r.mu.Unlock()
	close(r.stop)
	for _, f := range release {
		f(nil)
	}
}

// maxReplicateFrame bounds one replication frame's state bytes.
const maxReplicateFrame = 4 << 20

func (r *replicator) loop() {
	var conn *transport.Client
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	backoff := 10 * time.Millisecond
	// pause waits before a retry, and reports false if the replicator
	// stopped meanwhile.
	pause := func() bool {
		select {
		case <-r.stop:
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
		return true
	}
	for {
		select {
		case <-r.stop:
			return
		case <-r.kick:
		}
		for {
			// The round's entries are taken and their state read while no
			// push is applied (applyMu): every effect the state carries is
			// of a push whose entry is in this round or an earlier one, so
			// its pair reaches the peer with the state or before it.
			r.s.applyMu.Lock()
			r.mu.Lock()
			if r.gone {
				r.mu.Unlock()
				r.s.applyMu.Unlock()
				return
			}
			if len(r.pending) > 0 || len(r.waiters) > 0 {
				r.held = append(r.held, batch{entries: r.pending, waiters: r.waiters})
				r.pending, r.waiters = nil, nil
			}
			// One copy chunk rides along with each round of pushes: pushes
			// wait for at most a chunk, and copies are never starved.
			if len(r.bulk) > 0 && len(r.held) < 2 {
				r.held = append(r.held, r.bulk[0])
				r.bulk = r.bulk[1:]
			}
			// Batches for slots this server no longer heads cannot be
			// confirmed by the peer any more, nor can batches of an
			// earlier term: fail their pushes. The others get the copies
			// their slots need first.
			var moved []batch
			keep := r.held[:0]
			for _, b := range r.held {
				if b.stale || !r.s.headsAll(b.entries) {
					// Their pairs never reach the peer, but the state of
					// later rounds may carry their effects: each of their
					// slots must be copied to the peer before more of it.
					moved = append(moved, b)
					r.mustCopy(b.entries)
					continue
				}
				if !b.checked {
					b.entries, b.checked = r.copiesFirst(b.entries), true
				}
				keep = append(keep, b)
			}
			clear(r.held[len(keep):])
			r.held = keep
			todo := append([]batch(nil), r.held...)
			r.mu.Unlock()
			var msgs []wire.Replicate
			if len(todo) > 0 {
				msgs = r.build(todo)
			}
			r.s.applyMu.Unlock()
			for _, b := range moved {
				for _, f := range b.waiters {
					f(errMoved)
				}
			}
			if len(todo) == 0 {
				break
			}
			if conn == nil || conn.Err() != nil {
				var err error
				conn, err = r.dial()
				if err != nil {
					if backoff == 10*time.Millisecond {
						r.s.log.Warn("replication peer unreachable; holding its acks until it returns or leaves the layout", "peer", r.peer.ID, "err", err)
					}
					if !pause() {
						return
					}
					continue
				}
			}
			if err := r.send(conn, msgs); err != nil {
				r.s.log.Warn("replication failed; retrying", "peer", r.peer.ID, "err", err)
				conn.Close()
				conn = nil
				if !pause() {
					return
				}
				continue
			}
			backoff = 10 * time.Millisecond
			r.mu.Lock()
			if r.gone {
				// leave released these batches' waiters already.
				r.mu.Unlock()
				return
			}
			r.held = r.held[len(todo):]
			r.mu.Unlock()
			for _, b := range todo {
				for _, f := range b.waiters {
					f(nil)
				}
			}
		}
	}
}

func (r *replicator) dial() (*transport.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return transport.Dial(ctx, r.peer.Addr, transport.DialOptions{Hello: wire.Hello{Worker: wire.NoWorker, Role: wire.RoleReplica, Node: r.s.opts.ID}, DialTimeout: time.Second, Network: r.s.opts.Network})
}

// build reads the batches' current state into replication messages. Frames
// are cut at slot boundaries and each carries the pairs of its entries
// scoped to the slots whose state it carries; all but the last are marked
// More, and the peer imports none until it has the last, so that a peer
// never holds an effect without its pair.
func (r *replicator) build(todo []batch) []wire.Replicate {
	var msgs []wire.Replicate
	cur := wire.Replicate{}
	size := 0
	for _, b := range todo {
		for _, e := range b.entries {
			if e.deferred != nil {
				cur.Deferred = append(cur.Deferred, *e.deferred)
				continue
			}
			var in keyspace.SlotSet // the entry's slots in cur
			base, items := e.pairs, e.items
			if e.copy != nil {
				// The copy replaces the peer's state and pairs in its
				// slots, those without keys here too.
				id := e.copy.t.id
				cur.Replace = append(cur.Replace, wire.Replace{Table: id, Slots: e.copy.slots})
				base = r.s.dedup.scoped(id, e.copy.slots) // before the state is read
				items = e.copy.items()
			}
			claim := func() {
				for _, p := range base {
					sl := in
					if p.Slots != nil {
						sl = keyspace.Intersect(p.Slots, in)
					}
					if len(sl) > 0 {
						cur.Pairs = append(cur.Pairs, wire.Pair{Client: p.Client, Seq: p.Seq, Acked: p.Acked, Table: p.Table, Slots: sl})
					}
				}
				in = nil
			}
			add := func(st wire.State) {
				cur.States = append(cur.States, st)
				if st.Keys != nil {
					in.AddKeys(st.Keys)
				} else {
					in.AddKeyRun(st.Lo, int(st.N))
				}
				size += 4 * len(st.Floats)
				if size >= maxReplicateFrame {
					claim()
					cur.More = true
					msgs, cur, size = append(msgs, cur), wire.Replicate{}, 0
				}
			}
			for _, it := range items {
				st := it.t.store.Stride()
				if it.keys != nil {
					per := max(1, maxReplicateFrame/(4*st+8))
					for i := 0; i < len(it.keys); {
						j := min(i+per, len(it.keys))
						for j < len(it.keys) && keyspace.Slot(it.keys[j]) == keyspace.Slot(it.keys[j-1]) {
							j++ // a frame holds whole slots
						}
						keys := it.keys[i:j]
						f := make([]float32, len(keys)*st)
						it.t.store.Export(keys, f)
						add(wire.State{Table: it.t.id, Stride: uint32(st), Keys: keys, Floats: f})
						i = j
					}
					continue
				}
				per := uint64(max(keyspace.SlotSize, maxReplicateFrame/(4*st)))
				for lo, end := it.lo, it.lo+uint64(it.n); lo < end; {
					hi := min(end, (lo+per)&^(keyspace.SlotSize-1)) // a frame holds whole slots
					f := make([]float32, int(hi-lo)*st)
					it.t.store.ExportRun(lo, f)
					add(wire.State{Table: it.t.id, Stride: uint32(st), Lo: lo, N: uint32(hi - lo), Floats: f})
					lo = hi
				}
			}
			claim()
		}
	}
	return append(msgs, cur)
}

// send ships msgs and waits for the peer to confirm.
func (r *replicator) send(conn *transport.Client, msgs []wire.Replicate) error {
	errc := make(chan error, len(msgs))
	epoch := r.s.Epoch()
	for _, m := range msgs {
		id := conn.NextID()
		f := wire.NewFrame(wire.Header{Type: wire.TReplicate, Epoch: epoch, ReqID: id}, m.Parts()...)
		conn.Call(f, id, &transport.Call{
			OnReply: func(h wire.Header, rd *wire.Reader) error {
				p, err := rd.Payload(h)
				if err != nil {
					return err
				}
				if h.Type == wire.TError {
					code, msg, _ := wire.ParseError(p)
					errc <- fmt.Errorf("peer refused replication (code %d): %s", code, msg)
					return nil
				}
				errc <- nil
				return nil
			},
			OnFail: func(err error) { errc <- err },
		}, nil)
	}
	var errs []error
	quiet := time.NewTimer(replicateQuiet)
	defer quiet.Stop()
	for i := range msgs {
		select {
		case err := <-errc:
			if err != nil {
				errs = append(errs, err)
			}
			quiet.Reset(replicateQuiet)
		case <-quiet.C:
			// A peer that is up but answers nothing would otherwise hold
			// every push of these slots unacknowledged, silently: the
			// caller warns, reconnects and sends again (importing state
			// twice is harmless; a superseded connection's rounds are
			// refused).
			return fmt.Errorf("peer confirmed %d of %d replication messages, then nothing for %v", i, len(msgs), replicateQuiet)
		case <-r.stop:
			return errors.New("replicator stopped")
		}
	}
	return errors.Join(errs...)
}

// replicateQuiet is how long a replicator waits for its peer's next
// confirmation before it gives up on the connection (a variable for tests).
var replicateQuiet = 10 * time.Second

// maxReplaced bounds the slots one replication round replaces.
const maxReplaced = 1 << 22

// maxStaged bounds the messages of one replication round a receiver holds
// before the round's last (4 MiB of state each).
const maxStaged = 1024

// handleReplicate installs state that a head sent. The messages of a round
// marked More are kept until its last, and then all are installed at once.
func (s *Server) handleReplicate(c *conn, h wire.Header, p []byte) (wire.Code, error) {
	m, err := wire.ParseReplicate(p)
	if err != nil {
		c.staged = nil
		return wire.CodeBadRequest, err
	}
	round := []wire.Replicate{m}
	if m.More || len(c.staged) > 0 {
		if len(c.staged) >= maxStaged {
			c.staged = nil
			return wire.CodeBadRequest, fmt.Errorf("replication round of more than %d messages", maxStaged)
		}
		// The payload buffer is reused for the next frame: keep a copy.
		own := make([]uint64, (len(p)+7)/8)
		copy(wire.U64Bytes(own), p)
		if m, err = wire.ParseReplicate(wire.U64Bytes(own)[:len(p)]); err != nil {
			c.staged = nil
			return wire.CodeBadRequest, err
		}
		c.staged = append(c.staged, staged{epoch: h.Epoch, m: m})
		if m.More {
			s.replyOK(c, h.ReqID, s.Epoch())
			return 0, nil
		}
		round = round[:0]
		for _, st := range c.staged {
			if st.epoch != h.Epoch {
				c.staged = nil
				return wire.CodeStaleEpoch, fmt.Errorf("replication round spans epochs %d and %d", st.epoch, h.Epoch)
			}
			round = append(round, st.m)
		}
		c.staged = nil
	}
	if e := s.Epoch(); h.Epoch > e {
		s.awaitLayout(h.Epoch, -1)
	}
	// Check and import under the layout lock: a new layout (which may make
	// this server the head of these slots) cannot be installed in between,
	// so a deposed head's late state never overwrites newer pushes.
	s.replicaMu.Lock()
	defer s.replicaMu.Unlock()
	if c.gen != s.replicaGen[c.hello.Node] {
		return wire.CodeStaleEpoch, fmt.Errorf("replication on a superseded connection from %s", c.hello.Node)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	rm := s.ring
	if rm == nil || h.Epoch != rm.Epoch {
		return wire.CodeStaleEpoch, fmt.Errorf("replication at epoch %d, server is at %d", h.Epoch, s.epochLocked())
	}
	sender := rm.Index(c.hello.Node)
	replaced := 0
	for _, m := range round {
		for _, r := range m.Replace {
			if s.tables[r.Table] == nil {
				return wire.CodeUnknownTable, fmt.Errorf("replaced slots of table %d", r.Table)
			}
			for i := 0; i < len(r.Slots); i += 2 {
				if replaced += int(r.Slots[i+1] - r.Slots[i]); replaced > maxReplaced {
					return wire.CodeBadRequest, fmt.Errorf("replication round replaces more than %d slots", maxReplaced)
				}
				for sl := r.Slots[i]; sl < r.Slots[i+1]; sl++ {
					if h := rm.SlotOwner(sl); h != sender {
						return wire.CodeNotOwner, fmt.Errorf("replication from %s replaces slot %d, headed by %s", c.hello.Node, sl, rm.Servers[h].ID)
					}
				}
			}
		}
		for _, d := range m.Deferred {
			t := s.tables[d.Pair.Table]
			if t == nil || len(d.Vals) != len(d.Keys)*t.spec.Width {
				return wire.CodeBadRequest, fmt.Errorf("deferred push for table %d: %d keys, %d values", d.Pair.Table, len(d.Keys), len(d.Vals))
			}
			if err := checkHead(rm, sender, wire.State{Keys: d.Keys}); err != nil {
				return wire.CodeNotOwner, fmt.Errorf("deferred push from %s: %w", c.hello.Node, err)
			}
		}
		for _, st := range m.States {
			t := s.tables[st.Table]
			if t == nil || int(st.Stride) != t.store.Stride() {
				return wire.CodeUnknownTable, fmt.Errorf("replicated state for table %d of stride %d", st.Table, st.Stride)
			}
			if err := checkHead(rm, sender, st); err != nil {
				return wire.CodeNotOwner, fmt.Errorf("replication from %s: %w", c.hello.Node, err)
			}
		}
	}
	// A full copy replaces the slots' state and pairs: first the keys of
	// the copied slots that the round does not carry are deleted (those it
	// carries are overwritten in place) and the pairs there forgotten, then
	// the round's states and pairs are installed (all were read at once on
	// the head).
	if replaced > 0 {
		carried := carriedKeys(round)
		for _, m := range round {
			for _, r := range m.Replace {
				t := s.tables[r.Table]
				for i := 0; i < len(r.Slots); i += 2 {
					for sl := r.Slots[i]; sl < r.Slots[i+1]; sl++ {
						t.store.DeleteSlot(sl, carried[tableSlot{r.Table, sl}])
					}
				}
				s.dedup.drop(r.Table, r.Slots)
			}
		}
	}
	for _, m := range round {
		for _, st := range m.States {
			t := s.tables[st.Table]
			if st.Keys != nil {
				t.store.Import(st.Keys, st.Floats)
			} else {
				t.store.ImportRun(st.Lo, st.Floats)
			}
		}
		for _, d := range m.Deferred {
			s.held.add(d)
		}
		for _, pr := range m.Pairs {
			s.dedup.add(pr.Client, pr.Seq, pr.Acked, pr.Table, pr.Slots)
			s.held.drop(pr.Client, pr.Seq)
		}
	}
	s.stats.replicated.Add(int64(len(p)))
	s.replyOK(c, h.ReqID, rm.Epoch)
	return 0, nil
}

// carriedKeys returns, by table and slot, the bitmap of the keys whose
// state round carries.
func carriedKeys(round []wire.Replicate) map[tableSlot]uint64 {
	out := map[tableSlot]uint64{}
	for _, m := range round {
		for _, st := range m.States {
			if st.Keys != nil {
				for _, k := range st.Keys {
					out[tableSlot{st.Table, keyspace.Slot(k)}] |= 1 << (k % keyspace.SlotSize)
				}
				continue
			}
			for k, end := st.Lo, st.Lo+uint64(st.N); k < end; {
				sl := keyspace.Slot(k)
				hi := min(end, keyspace.SlotStart(sl+1))
				bits := ^uint64(0)
				if n := hi - k; n < keyspace.SlotSize {
					bits = (uint64(1)<<n - 1) << (k - keyspace.SlotStart(sl))
				}
				out[tableSlot{st.Table, sl}] |= bits
				k = hi
			}
		}
	}
	return out
}

type staged struct {
	epoch uint64
	m     wire.Replicate
}

func (s *Server) replyOK(c *conn, reqID, epoch uint64) {
	var pre [wire.ReplyPrefixSize]byte
	wire.PutReply(&pre, 0)
	c.Send(transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: epoch, ReqID: reqID}, pre[:])})
}

// checkHead reports an error unless server sender heads every slot of st.
func checkHead(rm *ring.Map, sender int, st wire.State) error {
	if sender < 0 {
		return errors.New("sender is not in the layout")
	}
	check := func(sl uint64) error {
		if h := rm.SlotOwner(sl); h != sender {
			return fmt.Errorf("slot %d is headed by %s", sl, rm.Servers[h].ID)
		}
		return nil
	}
	if st.Keys != nil {
		last := ^uint64(0)
		for _, k := range st.Keys {
			if sl := keyspace.Slot(k); sl != last {
				if err := check(sl); err != nil {
					return err
				}
				last = sl
			}
		}
		return nil
	}
	if st.N == 0 {
		return nil
	}
	for sl := keyspace.Slot(st.Lo); sl <= keyspace.Slot(st.Lo+uint64(st.N)-1); sl++ {
		if err := check(sl); err != nil {
			return err
		}
	}
	return nil
}

// headsAll reports whether this server heads every slot of entries under
// its current layout.
func (s *Server) headsAll(entries []entry) bool {
	s.mu.RLock()
	rm := s.ring
	s.mu.RUnlock()
	if rm == nil {
		return false
	}
	me := rm.Index(s.opts.ID)
	if me < 0 {
		return false
	}
	for _, e := range entries {
		if !s.headsItems(rm, me, e.items) {
			return false
		}
		if d := e.deferred; d != nil && !s.headsItems(rm, me, []dirty{{keys: d.Keys}}) {
			return false
		}
	}
	return true
}

func (s *Server) headsItems(rm *ring.Map, me int, items []dirty) bool {
	for _, it := range items {
		if it.keys != nil {
			last := ^uint64(0)
			for _, k := range it.keys {
				if sl := keyspace.Slot(k); sl != last {
					if rm.SlotOwner(sl) != me {
						return false
					}
					last = sl
				}
			}
			continue
		}
		if it.n == 0 {
			continue
		}
		for sl := keyspace.Slot(it.lo); sl <= keyspace.Slot(it.lo+uint64(it.n)-1); sl++ {
			if rm.SlotOwner(sl) != me {
				return false
			}
		}
	}
	return true
}
