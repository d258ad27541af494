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
)

// replicator streams the state of keys this server heads to one other
// server of their chains: the driver of one peerQueue. It reads the state
// when it sends, not when the push was applied, so a later push to the same
// key always ships a newer state, and several pushes to one key between two
// sends ship it once: the head aggregates before it replicates. Its
// goroutine (run) owns the connection, the batching into rounds and the
// retries; the queue's policy decides when pushes are acknowledged.
type replicator struct {
	s      *Server
	peer   ring.Server
	policy AckPolicy

	// mu guards q and policy (which a stage switch changes: the stream to
	// a BackupPS is AckBulk, to a chain member AckChain). It is a leaf
	// lock: nothing that takes a lock is called while it is held.
	mu sync.Mutex
	q  peerQueue
	// lastCut is when the stream last sent a round (its goroutine's).
	lastCut time.Time
	kick    chan struct{}
	stop    chan struct{}
	once    sync.Once
	// ledger is the pairs to send to a BackupPS's loss ledger before their
	// pushes are acknowledged (ledger_stream.go).
	ledger ledgerOut
}

func newReplicator(s *Server, peer ring.Server, changes int, policy AckPolicy) *replicator {
	r := &replicator{s: s, peer: peer, policy: policy, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	r.q.policy = policy
	r.q.sync = newPeerSync(s.opts.ID, peer.ID, changes)
	return r
}

// add queues e, and returns the waiter to call at once with nil (see
// peerQueue.add), which the caller does once it holds no lock.
func (r *replicator) add(e entry, w waiter) waiter {
	r.mu.Lock()
	now := r.q.add(e, w)
	r.mu.Unlock()
	r.wake()
	return now
}

// addBulk queues a copy chunk; done is told once the peer holds it, or
// left. The caller holds no lock.
func (r *replicator) addBulk(c *slotCopy, done waiter) {
	r.mu.Lock()
	now := r.q.addBulk(c, done)
	r.mu.Unlock()
	if now != nil {
		now(nil)
	}
	r.wake()
}

// setPolicy changes the stream's acknowledgement policy: pushes queued
// from now on follow p. The caller holds no lock but may hold applyMu.
func (r *replicator) setPolicy(p AckPolicy) {
	r.mu.Lock()
	changed := r.policy != p
	r.policy, r.q.policy = p, p
	r.mu.Unlock()
	if changed {
		r.wake()
	}
}

func (r *replicator) currentPolicy() AckPolicy {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.policy
}

// cutWait is how long an AckBulk stream waits before its next round: it
// cuts a round once per sync interval, so that every key pushed any number
// of times in between ships once (the ActivePS's aggregation).
func (r *replicator) cutWait(now time.Time) time.Duration {
	if r.currentPolicy() != AckBulk || r.lastCut.IsZero() {
		return 0
	}
	return r.s.syncInterval() - now.Sub(r.lastCut)
}

func (r *replicator) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *replicator) cut() {
	r.mu.Lock()
	r.q.cut()
	r.mu.Unlock()
}

// leave stops the stream and releases every waiter. The caller holds no
// lock.
func (r *replicator) leave() {
	r.mu.Lock()
	release := r.q.leave()
	r.mu.Unlock()
	release = append(release, r.leaveLedger()...)
	r.once.Do(func() { close(r.stop) })
	for _, w := range release {
		w(nil)
	}
}

// durable returns the peer's durability watermark and the last sequence
// number queued for it (peerQueue.durable).
func (r *replicator) durable() (durable, queued uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.q.durable()
}

// maxReplicateFrame bounds one replication frame's state bytes.
const maxReplicateFrame = 4 << 20

// replicateQuiet is how long a replicator waits for its peer's next
// confirmation before it gives up on the connection (a variable for tests).
var replicateQuiet = 10 * time.Second

const minBackoff = 10 * time.Millisecond

// stream is a replicator's connection and its rounds in flight, owned by
// its goroutine.
type stream struct {
	ctx      context.Context
	r        *replicator
	conn     *transport.Client
	inflight []sentRound
	backoff  time.Duration
	quiet    *time.Timer
	// cut fires when an AckBulk stream's next round is due.
	cut *time.Timer
}

// sentRound is a round in flight: its messages' replies arrive on replies.
type sentRound struct {
	round     uint64
	msgs, got int
	replies   chan error
}

// run is the replicator's goroutine: it sends rounds while the policy's
// window allows, and takes the peer's confirmations, until the replicator
// stops or ctx ends.
func (r *replicator) run(ctx context.Context) {
	st := &stream{ctx: ctx, r: r, backoff: minBackoff, quiet: time.NewTimer(replicateQuiet), cut: time.NewTimer(time.Hour)}
	defer func() {
		st.quiet.Stop()
		st.cut.Stop()
		if st.conn != nil {
			st.conn.Close()
		}
	}()
	for {
		if !st.fill() {
			return
		}
		var first chan error
		var quiet <-chan time.Time
		if len(st.inflight) > 0 {
			first, quiet = st.inflight[0].replies, st.quiet.C
		}
		select {
		case <-r.stop:
			return
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-st.cut.C:
		case err := <-first:
			st.reply(err)
		case <-quiet:
			// A peer that is up but answers nothing would otherwise hold
			// every push of these slots unacknowledged, silently: give up
			// on the connection, and send again (importing state twice is
			// harmless; a superseded connection's rounds are refused).
			sr := st.inflight[0]
			st.fail(fmt.Errorf("peer confirmed %d of %d replication messages, then nothing for %v", sr.got, sr.msgs, replicateQuiet))
		}
	}
}

// fill sends rounds while the window allows and there is something to
// send; it reports false once the replicator stopped.
func (st *stream) fill() bool {
	r := st.r
	for len(st.inflight) < r.currentPolicy().window() {
		if wait := r.cutWait(time.Now()); wait > 0 {
			st.cut.Reset(wait)
			return true
		}
		p, msgs := r.nextRound()
		for _, w := range p.failed {
			w(errMoved)
		}
		for _, w := range p.acked {
			w(nil)
		}
		if len(p.send) == 0 {
			return true
		}
		if st.conn == nil || st.conn.Err() != nil {
			conn, err := r.dial(st.ctx)
			if err != nil {
				if st.backoff == minBackoff {
					r.s.log.Warn("replication peer unreachable; holding its acks until it returns or leaves the layout", "peer", r.peer.ID, "err", err)
				}
				r.mu.Lock()
				r.q.unconfirm(p.round)
				r.mu.Unlock()
				if !st.pause() {
					return false
				}
				continue
			}
			st.conn = conn
		}
		if len(st.inflight) == 0 {
			st.quiet.Reset(replicateQuiet)
		}
		st.inflight = append(st.inflight, st.send(p.round, msgs))
		r.lastCut = time.Now()
	}
	return true
}

// reply takes the reply to a message of the oldest round in flight.
func (st *stream) reply(err error) {
	if err != nil {
		st.fail(err)
		return
	}
	st.quiet.Reset(replicateQuiet)
	sr := &st.inflight[0]
	if sr.got++; sr.got < sr.msgs {
		return
	}
	st.inflight = st.inflight[1:]
	st.backoff = minBackoff
	r := st.r
	r.mu.Lock()
	release := r.q.confirmed(sr.round)
	durable, _ := r.q.durable()
	r.mu.Unlock()
	for _, w := range release {
		w(nil)
	}
	if f := r.s.onDurable; f != nil {
		f(r.peer.ID, durable)
	}
}

// fail drops the connection; every round in flight is sent again.
func (st *stream) fail(err error) {
	r := st.r
	r.s.log.Warn("replication failed; retrying", "peer", r.peer.ID, "err", err)
	st.conn.Close()
	st.conn, st.inflight = nil, nil
	r.mu.Lock()
	r.q.unconfirm(0)
	r.mu.Unlock()
	st.pause()
}

// pause waits before a retry, and reports false if the replicator stopped
// meanwhile.
func (st *stream) pause() bool {
	t := time.NewTimer(st.backoff)
	defer t.Stop()
	st.backoff = min(2*st.backoff, time.Second)
	select {
	case <-st.r.stop:
		return false
	case <-st.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (r *replicator) dial(ctx context.Context) (*transport.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return transport.Dial(ctx, r.peer.Addr, transport.DialOptions{Hello: wire.Hello{Worker: wire.NoWorker, Role: wire.RoleReplica, Node: r.s.opts.ID}, DialTimeout: time.Second, Network: r.s.opts.Network})
}

// send ships a round's messages; their replies arrive on the round's
// channel.
func (st *stream) send(round uint64, msgs []wire.Replicate) sentRound {
	sr := sentRound{round: round, msgs: len(msgs), replies: make(chan error, len(msgs))}
	epoch := st.r.s.Epoch()
	bulk := st.r.currentPolicy() == AckBulk
	if bulk {
		st.r.s.stats.streamRounds.Add(1)
	}
	for _, m := range msgs {
		id := st.conn.NextID()
		parts := m.Parts()
		if bulk {
			n := int64(wire.HeaderSize)
			for _, p := range parts {
				n += int64(len(p))
			}
			st.r.s.stats.streamBytes.Add(n)
		}
		f := wire.NewFrameOn(wire.Header{Type: wire.TReplicate, Epoch: epoch, ReqID: id}, st.conn.Authenticated(), parts...)
		st.conn.Call(f, id, &transport.Call{
			OnReply: func(h wire.Header, rd *wire.Reader) error {
				return peerReply(h, rd, errReplicationRefused, sr.replies)
			},
			OnFail: func(err error) { sr.replies <- err },
		}, nil)
	}
	return sr
}

// errReplicationRefused: a peer refused a replicate frame.
var errReplicationRefused = errors.New("peer refused replication")

// peerReply reads a peer's reply to a replicate or ledger frame and
// sends its answer on answers: nil for an acknowledgement, the peer's
// refusal wrapping refused. It returns an error only when the reply
// cannot be read, which breaks the connection.
func peerReply(h wire.Header, rd *wire.Reader, refused error, answers chan<- error) error {
	p, err := rd.Payload(h)
	if err != nil {
		return err
	}
	if h.Type == wire.TError {
		code, msg, _ := wire.ParseError(p)
		answers <- fmt.Errorf("%w (code %d): %s", refused, code, msg)
		return nil
	}
	answers <- nil
	return nil
}

// nextRound plans the next round and reads its state. Pushes go on while
// the state is read: the round's entries are taken while none is applied
// (applyMu), then the state is read, then the entries of the pushes
// applied meanwhile, whose effects the state may carry, join the round
// with their keys read again, while none is applied. Every effect the
// round's state carries is then of a push whose entry is in this round or
// an earlier one, so its pair reaches the peer with the state or before it
// (docs/design/server.md, "Rounds").
func (r *replicator) nextRound() (plan, []wire.Replicate) {
	s := r.s
	for {
		s.applyMu.Lock()
		v := s.view()
		applies := s.applies.Load()
		r.mu.Lock()
		p := r.q.take(0, true, v.headsEntry, v.changes)
		r.mu.Unlock()
		s.applyMu.Unlock()
		if len(p.send) == 0 {
			return p, nil
		}
		if s.onRoundRead != nil {
			s.onRoundRead()
		}
		msgs := s.build(p.send)
		if s.applies.Load() == applies && s.view().gen == v.gen {
			// No push changed the store while the state was read.
			return p, msgs
		}
		s.applyMu.Lock()
		if s.view().gen != v.gen {
			// A layout was installed while the state was read: plan again
			// under it (its cut may have made these batches stale).
			r.mu.Lock()
			r.q.unconfirm(p.round)
			r.mu.Unlock()
			s.applyMu.Unlock()
			for _, w := range p.failed {
				w(errMoved)
			}
			for _, w := range p.acked {
				w(nil)
			}
			continue
		}
		r.mu.Lock()
		more := r.q.take(p.round, false, v.headsEntry, v.changes)
		r.mu.Unlock()
		if len(more.send) > 0 {
			msgs[len(msgs)-1].More = true
			msgs = append(msgs, s.build(more.send)...)
		}
		s.applyMu.Unlock()
		p.send = append(p.send, more.send...)
		p.failed = append(p.failed, more.failed...)
		p.acked = append(p.acked, more.acked...)
		return p, msgs
	}
}
