package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ring"
	"github.com/terrace-ml/terrace/transport"
	"github.com/terrace-ml/terrace/wire"
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
	pending []dirty
	pairs   []wire.Pair
	waiters []func(error)
	held    []batch // sent but not acknowledged, re-sent after a reconnect
	// bulk holds copies for new chain members, sent a chunk at a time
	// alongside the pushes: a copy reads the state when it is sent, so
	// letting pushes overtake it loses nothing, and pushes do not queue
	// behind a hundred megabytes of copies.
	bulk []batch
	gone bool // the peer left the layout: release everything
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

type batch struct {
	items   []dirty
	pairs   []wire.Pair
	waiters []func(error)
}

// errMoved fails pushes whose slots this server stopped heading before
// their replication was confirmed: the client re-sends them to the new
// head, which holds them or not, and its pairs say which.
var errMoved = errors.New("slots moved to another head before replication completed")

func newReplicator(s *Server, peer ring.Server) *replicator {
	r := &replicator{s: s, peer: peer, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	go r.loop()
	return r
}

// add queues keys, the pushes they reflect, and a function to run once the
// peer has their state (nil), or has left the layout (nil), or the slots
// moved away (errMoved).
func (r *replicator) add(items []dirty, pairs []wire.Pair, done func(error)) {
	r.mu.Lock()
	if r.gone {
		r.mu.Unlock()
		if done != nil {
			done(nil)
		}
		return
	}
	r.pending = append(r.pending, items...)
	r.pairs = append(r.pairs, pairs...)
	if done != nil {
		r.waiters = append(r.waiters, done)
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// addBulk queues a copy chunk (see bulk).
func (r *replicator) addBulk(items []dirty, done func(error)) {
	r.mu.Lock()
	if r.gone {
		r.mu.Unlock()
		done(nil)
		return
	}
	r.bulk = append(r.bulk, batch{items: items, waiters: []func(error){done}})
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
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
	r.held, r.bulk, r.pending, r.pairs, r.waiters = nil, nil, nil, nil, nil
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
	for {
		select {
		case <-r.stop:
			return
		case <-r.kick:
		}
		for {
			r.mu.Lock()
			if r.gone {
				r.mu.Unlock()
				return
			}
			if len(r.pending) > 0 || len(r.waiters) > 0 {
				r.held = append(r.held, batch{items: r.pending, pairs: r.pairs, waiters: r.waiters})
				r.pending, r.pairs, r.waiters = nil, nil, nil
			}
			// One copy chunk rides along with each round of pushes: pushes
			// wait for at most a chunk, and copies are never starved.
			if len(r.bulk) > 0 && len(r.held) < 2 {
				r.held = append(r.held, r.bulk[0])
				r.bulk = r.bulk[1:]
			}
			// Batches for slots this server no longer heads cannot be
			// confirmed by the peer any more: fail their pushes.
			var moved []batch
			keep := r.held[:0]
			for _, b := range r.held {
				if r.s.headsAll(b.items) {
					keep = append(keep, b)
				} else {
					moved = append(moved, b)
				}
			}
			clear(r.held[len(keep):])
			r.held = keep
			todo := append([]batch(nil), r.held...)
			r.mu.Unlock()
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
					select {
					case <-r.stop:
						return
					case <-time.After(backoff):
					}
					backoff = min(2*backoff, time.Second)
					continue
				}
			}
			if err := r.send(conn, todo); err != nil {
				r.s.log.Warn("replication failed; retrying", "peer", r.peer.ID, "err", err)
				conn.Close()
				conn = nil
				select {
				case <-r.stop:
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
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
	return transport.Dial(ctx, r.peer.Addr, transport.DialOptions{Hello: wire.Hello{Worker: wire.NoWorker, Role: wire.RoleReplica, Node: r.s.opts.ID}, DialTimeout: time.Second})
}

// send ships the batches' current state and waits for the peer to confirm.
func (r *replicator) send(conn *transport.Client, todo []batch) error {
	var msgs []wire.Replicate
	cur := wire.Replicate{}
	size := 0
	for _, b := range todo {
		cur.Pairs = append(cur.Pairs, b.pairs...)
		for _, it := range b.items {
			st := it.t.store.Stride()
			if it.keys != nil {
				// Cut big key lists so a frame stays bounded.
				per := max(1, maxReplicateFrame/(4*st+8))
				for i := 0; i < len(it.keys); i += per {
					keys := it.keys[i:min(i+per, len(it.keys))]
					f := make([]float32, len(keys)*st)
					it.t.store.Export(keys, f)
					cur.States = append(cur.States, wire.State{Table: it.t.id, Stride: uint32(st), Keys: keys, Floats: f})
					size += 4 * len(f)
					if size >= maxReplicateFrame {
						msgs, cur, size = append(msgs, cur), wire.Replicate{}, 0
					}
				}
				continue
			}
			per := max(1, maxReplicateFrame/(4*st))
			for i := 0; i < it.n; i += per {
				n := min(per, it.n-i)
				f := make([]float32, n*st)
				it.t.store.ExportRun(it.lo+uint64(i), f)
				cur.States = append(cur.States, wire.State{Table: it.t.id, Stride: uint32(st), Lo: it.lo + uint64(i), N: uint32(n), Floats: f})
				size += 4 * len(f)
				if size >= maxReplicateFrame {
					msgs, cur, size = append(msgs, cur), wire.Replicate{}, 0
				}
			}
		}
	}
	msgs = append(msgs, cur)
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
	for range msgs {
		select {
		case err := <-errc:
			if err != nil {
				errs = append(errs, err)
			}
		case <-r.stop:
			return errors.New("replicator stopped")
		}
	}
	return errors.Join(errs...)
}

// handleReplicate installs state that a head sent.
func (s *Server) handleReplicate(c *conn, h wire.Header, p []byte) (wire.Code, error) {
	m, err := wire.ParseReplicate(p)
	if err != nil {
		return wire.CodeBadRequest, err
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
	for _, st := range m.States {
		t := s.tables[st.Table]
		if t == nil || int(st.Stride) != t.store.Stride() {
			return wire.CodeUnknownTable, fmt.Errorf("replicated state for table %d of stride %d", st.Table, st.Stride)
		}
		if err := checkHead(rm, sender, st); err != nil {
			return wire.CodeNotOwner, fmt.Errorf("replication from %s: %w", c.hello.Node, err)
		}
	}
	for _, st := range m.States {
		t := s.tables[st.Table]
		if st.Keys != nil {
			t.store.Import(st.Keys, st.Floats)
		} else {
			t.store.ImportRun(st.Lo, st.Floats)
		}
	}
	for _, pr := range m.Pairs {
		s.dedup.add(pr.Client, pr.Seq)
	}
	s.stats.replicated.Add(int64(len(p)))
	var pre [wire.ReplyPrefixSize]byte
	wire.PutReply(&pre, 0)
	c.Send(transport.Outgoing{Frame: wire.NewFrame(wire.Header{Type: wire.TReply, Epoch: rm.Epoch, ReqID: h.ReqID}, pre[:])})
	return 0, nil
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

// headsAll reports whether this server heads every slot of items under its
// current layout.
func (s *Server) headsAll(items []dirty) bool {
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
