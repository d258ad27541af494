package server

import (
	"context"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// The 2 -> 1 flush (docs/design/tiers.md, "2 -> 1: ActivePS flush, then
// retire"). A switch to stage 1 makes the BackupPS joiners of the data
// ring, and a head must see that each holds every push it acknowledged in
// the slots it will hold. When the coordinator vouches that every BackupPS
// has held its slots in full since the stage began (layout.Switch.Flush),
// the stream to it already carries that: once it has confirmed what was
// queued for it when the switch was installed, it holds every push
// acknowledged before, and every push after waits for it (its stream
// turned synchronous at the install). So the head waits for that instead
// of copying every slot. It copies after all, to a peer, wherever the
// stream cannot vouch for what it carried: a batch dropped (its slots
// reach the peer only by a copy on the next push that touches them), a
// stream replaced or gone, a slot the peer did not back up.

// flushMark is what the stream to a BackupPS had queued when the switch
// was installed: r is nil if there was no stream (no push to this head's
// slots since the stage began, so the BackupPS holds them).
type flushMark struct {
	r      *replicator
	queued uint64
	drops  uint64
}

// flushMarks returns, when l begins a flushing switch to stage 1 after the
// chains old of stage 2 or 3 and this server heads slots, the mark of the
// stream to each BackupPS whose stream can vouch for it. The caller holds
// applyMu: no push is applied meanwhile, so every push applied before is
// queued up to the mark.
func (s *Server) flushMarks(l *layout.Layout, old chains) map[string]flushMark {
	sw := l.Switch
	if sw == nil || !sw.Flush || sw.To != tier.Stage1 || old.backup == nil || old.ring == nil || old.ring.Index(s.opts.ID) < 0 {
		return nil
	}
	if l.Epoch != old.ring.Epoch {
		// Heads may have changed since this server's last layout (a
		// successor heading a slot lacks its old head's stream): copy.
		return nil
	}
	marks := map[string]flushMark{}
	for _, b := range old.backup.Servers {
		marks[b.ID] = flushMark{}
	}
	for _, r := range s.replicators() {
		if _, ok := marks[r.peer.ID]; !ok {
			continue
		}
		r.mu.Lock()
		_, queued := r.q.durable()
		m, ok := flushMark{r: r, queued: queued, drops: r.q.drops}, !r.q.gone && !r.q.sync.copyPending()
		r.mu.Unlock()
		if ok {
			marks[r.peer.ID] = m
		} else {
			delete(marks, r.peer.ID)
		}
	}
	return marks
}

// flush takes out of plans the copies to the BackupPS that their streams
// vouch for, once they have confirmed what was queued at the install, and
// returns what is left to copy; false if ctx ended first.
func (s *Server) flush(ctx context.Context, old chains, plans map[string]*copyPlan, keys int64, marks map[string]flushMark) (map[string]*copyPlan, int64, bool) {
	for id, m := range marks {
		c := plans[id]
		if c == nil || !backedUp(old, c) {
			continue
		}
		if !s.awaitFlush(ctx, id, m) {
			if ctx.Err() != nil {
				return nil, 0, false
			}
			s.log.Info("flush to a BackupPS cannot vouch for its stream; copying", "peer", id)
			continue
		}
		for _, ch := range c.chunks {
			keys -= int64(ch.keys)
		}
		delete(plans, id)
		s.handoff.flushed.Add(1)
	}
	return plans, keys, true
}

// backedUp reports whether the peer of c was a BackupPS of every slot c
// copies under old.
func backedUp(old chains, c *copyPlan) bool {
	var bk []ring.Server
	var scratch []int
	for _, ch := range c.chunks {
		for i := 0; i < len(ch.slots); i += 2 {
			for sl := ch.slots[i]; sl < ch.slots[i+1]; sl++ {
				bk, scratch = old.backups(sl, bk[:0], scratch)
				if !contains(bk, c.peer.ID) {
					return false
				}
			}
		}
	}
	return true
}

// flushPoll is how often a flush looks at its stream's watermark.
const flushPoll = 2 * time.Millisecond

// awaitFlush waits until the stream of m has confirmed everything queued
// up to its mark, and reports whether it can vouch for it: false if the
// stream dropped a batch, was replaced or left, or ctx ended.
func (s *Server) awaitFlush(ctx context.Context, id string, m flushMark) bool {
	if m.r == nil {
		return true
	}
	t := time.NewTicker(flushPoll)
	defer t.Stop()
	for {
		s.replMu.Lock()
		cur := s.repl[id]
		s.replMu.Unlock()
		m.r.mu.Lock()
		durable, _ := m.r.q.durable()
		drops, gone := m.r.q.drops, m.r.q.gone
		m.r.mu.Unlock()
		switch {
		case cur != m.r || gone || drops != m.drops:
			return false
		case durable >= m.queued:
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-m.r.stop:
			return false
		case <-t.C:
		}
	}
}
