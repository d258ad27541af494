package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/keyspace"
)

// ledgerOut is what an ActivePS must tell one BackupPS before it
// acknowledges pushes: their pairs, for the BackupPS's loss ledger
// (ledger.go). Its goroutine (runLedger) sends whatever gathered while the
// previous message was in flight as one message (group commit), so the
// messages are one per round trip, not one per push; a pair costs its
// client, seq and table (a few varints) and its slot set.
type ledgerOut struct {
	mu      sync.Mutex // a leaf
	pairs   []wire.Pair
	waiters []waiter
	gone    bool
	kick    chan struct{}
	start   sync.Once
}

// errLedgerRefused: the BackupPS refused the pairs (a stale layout on
// one side): the pushes are failed back, and their clients re-send them.
var errLedgerRefused = errors.New("the BackupPS refused the ledger")

// addLedger queues ps (a push's pair scoped to the slots the peer holds
// of it, after the markers of the pushes it re-sends: ledgerPairs) for the
// peer's ledger, and returns the waiter to call at once with nil (the peer
// left the layout), which the caller does once it holds no lock.
func (r *replicator) addLedger(w waiter, ps ...wire.Pair) (now waiter) {
	o := &r.ledger
	o.start.Do(func() {
		o.kick = make(chan struct{}, 1)
		r.s.spawn(r.runLedger)
	})
	o.mu.Lock()
	if o.gone {
		o.mu.Unlock()
		return w
	}
	o.pairs = append(o.pairs, ps...)
	o.waiters = append(o.waiters, w)
	o.mu.Unlock()
	select {
	case o.kick <- struct{}{}:
	default:
	}
	return nil
}

// queueLedger queues pair for peer's ledger with its waiter; the caller
// holds no lock.
func (s *Server) queueLedger(peer ring.Server, pair wire.Pair, w waiter) {
	if r := s.liveReplicator(peer, w); r != nil {
		if now := r.addLedger(w, pair); now != nil {
			now(nil)
		}
	}
}

// leaveLedger releases every waiter: the peer left the layout.
func (r *replicator) leaveLedger() []waiter {
	o := &r.ledger
	o.mu.Lock()
	defer o.mu.Unlock()
	o.gone = true
	w := o.waiters
	o.pairs, o.waiters = nil, nil
	return w
}

func (o *ledgerOut) take() ([]wire.Pair, []waiter) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p, w := o.pairs, o.waiters
	o.pairs, o.waiters = nil, nil
	return p, w
}

// putBack returns pairs not sent, ahead of those queued since.
func (o *ledgerOut) putBack(p []wire.Pair, w []waiter) (gone bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gone {
		return true
	}
	o.pairs, o.waiters = append(p, o.pairs...), append(w, o.waiters...)
	return false
}

// runLedger is the goroutine of the replicator's ledger stream.
func (r *replicator) runLedger(ctx context.Context) {
	o := &r.ledger
	var conn *transport.Client
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	backoff := minBackoff
	for {
		select {
		case <-r.stop:
			return
		case <-ctx.Done():
			return
		case <-o.kick:
		}
		for {
			pairs, waiters := o.take()
			if len(pairs) == 0 {
				break
			}
			err := r.sendLedger(ctx, &conn, pairs)
			switch {
			case err == nil:
				backoff = minBackoff
				for _, w := range waiters {
					w(nil)
				}
				continue
			case errors.Is(err, errLedgerRefused):
				for _, w := range waiters {
					w(errMoved)
				}
				continue
			}
			if conn != nil {
				conn.Close()
				conn = nil
			}
			if o.putBack(pairs, waiters) {
				for _, w := range waiters {
					w(nil)
				}
				return
			}
			t := time.NewTimer(backoff)
			backoff = min(2*backoff, time.Second)
			select {
			case <-r.stop:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// sendLedger sends pairs as one message and waits for the BackupPS's
// answer. The peer leaving the layout meanwhile counts as success: the
// pushes stop waiting for it (as peerQueue.leave).
func (r *replicator) sendLedger(ctx context.Context, conn **transport.Client, pairs []wire.Pair) error {
	if *conn == nil || (*conn).Err() != nil {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := transport.Dial(dctx, r.peer.Addr, transport.DialOptions{Hello: wire.Hello{Worker: wire.NoWorker, Role: wire.RoleLedger, Node: r.s.opts.ID}, DialTimeout: time.Second, Network: r.s.opts.Network})
		cancel()
		if err != nil {
			return err
		}
		*conn = c
	}
	m := wire.Replicate{Pairs: pairs}
	parts := m.Parts()
	n := int64(wire.HeaderSize)
	for _, p := range parts {
		n += int64(len(p))
	}
	r.s.stats.ledgerBytes.Add(n)
	r.s.stats.ledgerPairs.Add(int64(len(pairs)))
	id := (*conn).NextID()
	reply := make(chan error, 1)
	f := wire.NewFrame(wire.Header{Type: wire.TLedger, Epoch: r.s.Epoch(), ReqID: id}, parts...)
	(*conn).Call(f, id, &transport.Call{
		OnReply: func(h wire.Header, rd *wire.Reader) error {
			return peerReply(h, rd, errLedgerRefused, reply)
		},
		OnFail: func(err error) { reply <- err },
	}, nil)
	quiet := time.NewTimer(replicateQuiet)
	defer quiet.Stop()
	select {
	case err := <-reply:
		return err
	case <-r.stop:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-quiet.C:
		(*conn).Forget(id)
		return fmt.Errorf("ledger: no answer from %s for %v", r.peer.ID, replicateQuiet)
	}
}

// handleLedger records an ActivePS's pairs in this BackupPS's ledger. It
// takes them only from a server on the data ring of this server's layout,
// at its epoch, while this server is a BackupPS: a deposed ActivePS's are
// refused (it fails its pushes back, and their clients re-send them).
func (s *Server) handleLedger(c *conn, h wire.Header, p []byte) (wire.Code, error) {
	m, err := wire.ParseReplicate(p)
	if err != nil {
		return wire.CodeBadRequest, err
	}
	if e := s.Epoch(); h.Epoch > e {
		s.awaitLayout(h.Epoch, -1)
	}
	// Under mu, so that a fallback's layout (which freezes the ledger
	// under mu) is installed either before these pairs are refused or
	// after they are in the ledger it freezes.
	s.mu.RLock()
	defer s.mu.RUnlock()
	rm := s.ring
	var code wire.Code
	switch {
	case rm == nil || h.Epoch != rm.Epoch:
		code, err = wire.CodeStaleEpoch, fmt.Errorf("ledger at epoch %d, server is at %d", h.Epoch, s.epochLocked())
	case !s.chains.isBackup(s.opts.ID) || rm.Index(c.hello.Node) < 0:
		code, err = wire.CodeNotOwner, fmt.Errorf("ledger from %s, which is not an ActivePS of this BackupPS", c.hello.Node)
	}
	allows := false
	var anc []uint64
	s.pairMu.Lock()
	for _, pr := range m.Pairs {
		if pr.Acked == ledgerAncestor {
			anc = append(anc, pr.Seq)
			continue
		}
		switch {
		case len(pr.Slots) == 0:
			// A retraction (retractOnFailure) is taken from anyone, at
			// any epoch: it only ever names a push that was failed back,
			// which no one acknowledges.
			s.ledger.retract(pr.Client, pr.Seq)
		case code == 0:
			held := s.dedup.heldAt(pr.Client, pr.Seq)
			for _, a := range anc {
				held = held.union(s.dedup.heldAt(pr.Client, a))
			}
			s.ledger.allow(pr, held, anc...)
		default:
			allows = true
		}
		anc = anc[:0]
	}
	s.pairMu.Unlock()
	if allows {
		return code, err
	}
	s.replyOK(c, h.ReqID, s.epochLocked())
	return 0, nil
}

// retractOnFailure wraps done, the waiter of a push whose pair is queued
// for the ledgers of peers, so that a failure (errMoved: the push's slots
// moved before its chain held it) retracts the pair from those ledgers
// before the client hears of it. The client re-sends the push as parts
// under new sequence numbers, whose pairs the ledgers learn; the failed
// push's own entry would otherwise stay until a copy of its slots reached
// the BackupPS (the head that applies the parts does not stream the old
// pair), and a fallback meanwhile would count it lost although its parts
// were applied (docs/design/tiers.md, "What the ledger counts exactly").
func (s *Server) retractOnFailure(done waiter, pair wire.Pair, peers []ring.Server) waiter {
	if len(peers) == 0 {
		return done
	}
	return func(err error) {
		if err == nil {
			done(nil)
			return
		}
		retraction := pair
		retraction.Slots, retraction.Acked = nil, 0
		finish := allDone(len(peers)+1, func(error) { done(err) })
		for _, p := range peers {
			s.queueLedger(p, retraction, finish)
		}
		finish(nil)
	}
}

// ledgerAncestor, as a ledger pair's Acked, marks the pair as a push that
// the next pair of the message re-sends (wire.Data.Ancestors): where the
// BackupPS holds its effect, it holds the next one's.
const ledgerAncestor = ^uint64(0)

// ledgerPairs is ledgerPair after the markers of the pushes it re-sends.
func ledgerPairs(pair wire.Pair, items []item, worker uint32, ancestors []uint64) []wire.Pair {
	p := ledgerPair(pair, items, worker)
	out := make([]wire.Pair, 0, len(ancestors)+1)
	for _, a := range ancestors {
		out = append(out, wire.Pair{Client: p.Client, Seq: a, Acked: ledgerAncestor, Table: p.Table, Slots: p.Slots})
	}
	return append(out, p)
}

// ledgerPair is pair scoped to the slots of items: what the BackupPS that
// receives items holds of its push. In a ledger message a pair's Acked
// names the pushing worker instead (rank + 1; 0 for a client that is not
// a worker), so that a loss can be told per worker; the ledger has no use
// for the client's acknowledged watermark.
func ledgerPair(pair wire.Pair, items []item, worker uint32) wire.Pair {
	var sl keyspace.SlotSet
	for i, it := range items {
		if i == 0 {
			sl = it.keys.Slots()
			continue
		}
		sl = keyspace.Union(sl, it.keys.Slots())
	}
	pair.Slots, pair.Acked = sl, 0
	if worker != wire.NoWorker {
		pair.Acked = uint64(worker) + 1
	}
	return pair
}

// fellBack reports whether installing l after old makes server id, a
// BackupPS, a head by a fallback (coord's fallback: straight from the
// backup ring onto the ring of stage 1), and whether it may be one: a
// fallback in a switch out of stage 2 or 3, which had made it a joiner,
// looks like that switch's end, where the copies emptied the ledger.
func fellBack(id string, old, l *layout.Layout) (surely, maybe bool) {
	if old == nil || l.CurrentStage() != tier.Stage1 || l.Switch != nil || !slices.ContainsFunc(l.Servers, func(s ring.Server) bool { return s.ID == id }) {
		return false, false
	}
	if old.IsBackup(id) {
		return true, true
	}
	sw := old.Switch
	return false, sw != nil && sw.From >= tier.Stage2 && slices.ContainsFunc(old.Joining, func(s ring.Server) bool { return s.ID == id })
}

// union is where either s or o is held.
func (s scope) union(o scope) scope {
	if s.all || o.all {
		return scope{all: true}
	}
	return scope{slots: keyspace.Union(s.slots, o.slots)}
}

// heldAt is where this server holds the effect of (client, seq).
func (d *dedup) heldAt(client, seq uint64) scope {
	c := d.clients[client]
	if c == nil {
		return scope{}
	}
	return c.lookup(seq)
}

// DefaultFallbackGrace is how long a BackupPS that became a head at a
// fallback waits for surviving clients to re-send the pushes they never
// heard acknowledged before it counts the loss. They re-send as soon as
// they hold the fallback's layout, which reaches them as it reaches this
// server (every node long-polls the coordinator), so a re-send takes a
// layout poll and a round trip: well under a second even on a loaded
// host. The design's 10 s would outlast short jobs (a drill's runs end
// seconds after its revocation) and delay the count for nothing.
const DefaultFallbackGrace = 3 * time.Second

// countLoss reports the frozen ledger of the fallback of epoch once the
// grace has passed.
func (s *Server) countLoss(ctx context.Context, epoch uint64) {
	grace := s.opts.FallbackGrace
	if grace <= 0 {
		grace = DefaultFallbackGrace
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	s.pairMu.Lock()
	if s.ledger.frozen == nil || s.ledger.epoch != epoch {
		s.pairMu.Unlock()
		return
	}
	r := s.ledger.report()
	s.pairMu.Unlock()
	s.stats.ledgerLost.Add(int64(len(r.Lost)))
	s.log.Warn("fallback: acknowledged pushes lost with the ActivePS", "epoch", epoch, "lost", len(r.Lost), "allowed", len(r.Allowed))
	if f := s.opts.OnLoss; f != nil {
		f(r)
	}
}
