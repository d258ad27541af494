package server

import (
	"context"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
)

// HandoffStats counts what rebuilds shipped: full copies of slots sent to
// servers that newly belong to their chains.
type HandoffStats struct {
	Keys, Bytes int64
	Seconds     float64
	// Flushed counts the BackupPS that a 2 -> 1 switch flushed to instead
	// of copying (flush.go).
	Flushed int64
}

// handoffCounters are HandoffStats as the rebuilds add to them.
type handoffCounters struct {
	keys, bytes, nanos, flushed atomic.Int64
}

// Handoff returns what this server's rebuilds have shipped.
func (s *Server) Handoff() HandoffStats {
	return HandoffStats{Keys: s.handoff.keys.Load(), Bytes: s.handoff.bytes.Load(), Seconds: time.Duration(s.handoff.nanos.Load()).Seconds(),
		Flushed: s.handoff.flushed.Load()}
}

// rebuild sends, for every slot this server heads, a full copy to each
// server that belongs to the slot's chain now but did not before: a new
// successor after a failure (restoring k copies) or a joining server (the
// handoff's pre-copy); and for every slot it newly heads, to every member.
// Pushes keep flowing meanwhile: the copies read the current state when
// they are sent, and every later push to the slot goes to the new member
// too, in order on the same stream. When the copies a joiner needs are
// acknowledged, OnSynced reports it. It runs as a task of the server
// (Configure), after the rebuild of the layout before.
func (s *Server) rebuild(ctx context.Context, old, cur chains, flush map[string]flushMark) {
	if old.ring == nil {
		s.reportSynced(cur)
		return
	}
	start := time.Now()
	me := cur.ring.Index(s.opts.ID)
	if me < 0 {
		return
	}
	plans, keys := planCopies(s.tableList(), old, cur, s.opts.ID)
	if len(flush) > 0 {
		var ok bool
		if plans, keys, ok = s.flush(ctx, old, plans, keys, flush); !ok {
			return
		}
	}
	if len(plans) == 0 {
		s.reportSynced(cur)
		return
	}
	var wg sync.WaitGroup
	var bytes int64
	for _, c := range plans {
		r, replaced := s.replicatorFor(c.peer)
		if replaced != nil {
			replaced.leave()
		}
		if r == nil {
			return
		}
		for _, ch := range c.chunks {
			bytes += int64(ch.keys) * int64(4*ch.t.store.Stride())
			wg.Add(1)
			r.addBulk(&ch.slotCopy, func(error) { wg.Done() })
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	took := time.Since(start)
	s.handoff.keys.Add(keys)
	s.handoff.bytes.Add(bytes)
	s.handoff.nanos.Add(int64(took))
	s.log.Info("rebuilt chain members", "keys", keys, "bytes", bytes, "seconds", took.Seconds())
	s.reportSynced(cur)
}

// planCopies returns, by peer, the full copies of slots that server me
// must send after the chains changed from old to cur (see rebuild), and
// how many keys they hold.
func planCopies(tables []*tableState, old, cur chains, me string) (map[string]*copyPlan, int64) {
	send := map[string]*copyPlan{}
	var newSucc, oldSucc []ring.Server
	var scratch []int
	var keys int64
	i := cur.ring.Index(me)
	for _, t := range tables {
		t.store.Slots(func(sl, present uint64) {
			if cur.ring.SlotOwner(sl) != i {
				return
			}
			newSucc, scratch = cur.successors(sl, newSucc, scratch)
			oldSucc, scratch = old.successors(sl, oldSucc, scratch)
			// A server that heads the slot in place of a head that failed
			// cannot know how much of that head's copies the other members
			// received (a joiner's pre-copy, or a new successor's rebuild,
			// cut short): it copies the slot to all of them. A promoted
			// joiner whose old head is still on the ring does not: that
			// head holds everything it acknowledged (sync.go sends it a
			// copy of each slot before the first push to it).
			oldHead := old.ring.Servers[old.ring.SlotOwner(sl)].ID
			inherited := oldHead != me && cur.ring.Index(oldHead) < 0
			for _, p := range newSucc {
				if !inherited && (p.ID == oldHead || contains(oldSucc, p.ID)) {
					continue
				}
				c := send[p.ID]
				if c == nil {
					c = &copyPlan{peer: p}
					send[p.ID] = c
				}
				c.add(t, sl, bits.OnesCount64(present))
				keys += int64(bits.OnesCount64(present))
			}
		})
	}
	return send, keys
}

func (s *Server) reportSynced(ch chains) {
	if s.opts.OnRebuilt != nil {
		s.opts.OnRebuilt(ch.version)
	}
	if s.opts.OnSynced == nil {
		return
	}
	for _, id := range ch.moving {
		s.opts.OnSynced(id, ch.version)
	}
}

// copyChunkKeys bounds one copy chunk, so that a waiting push is sent after
// at most one chunk.
const copyChunkKeys = 1 << 18

// copyPlan is the copy chunks one peer must receive.
type copyPlan struct {
	peer   ring.Server
	chunks []*chunk
}

type chunk struct {
	slotCopy
	keys int
}

// add adds a slot holding n keys to the plan.
// copyChunkBytes bounds one copy chunk's state too: a push replicated
// alongside a chunk is acknowledged once the chunk is confirmed, and a
// chunk of 2^18 keys of a wide table (16 MB at width 16) held pushes for
// seconds during a stage switch on a loaded host; 1 MB gave the longest
// push of 20 switches with 100 MB 0.94 s, 2 MB 1.35 s over 6
// (docs/design/tiers.md).
const copyChunkBytes = 1 << 20

// chunkKeys is how many keys of t one copy chunk holds.
func chunkKeys(t *tableState) int {
	return max(64, min(copyChunkKeys, copyChunkBytes/(4*max(1, t.store.Stride()))))
}

func (c *copyPlan) add(t *tableState, sl uint64, n int) {
	last := len(c.chunks) - 1
	if last < 0 || c.chunks[last].t != t || c.chunks[last].keys >= chunkKeys(t) {
		c.chunks = append(c.chunks, &chunk{slotCopy: slotCopy{t: t}})
		last++
	}
	c.chunks[last].slots.Add(sl)
	c.chunks[last].keys += n
}

// slotCopy is a full copy of slots of a table: the keys present there when
// it is sent, their state, and the pairs this server holds there then.
type slotCopy struct {
	t     *tableState
	slots keyspace.SlotSet
}

// items returns the present keys of the copy's slots: full slots as runs
// of consecutive keys (sent without a key list), partial ones as key lists.
func (c *slotCopy) items() []item {
	var items []item
	for i := 0; i < len(c.slots); i += 2 {
		for sl := c.slots[i]; sl < c.slots[i+1]; sl++ {
			if present := c.t.store.Present(sl); present != 0 {
				items = addSlot(items, c.t, sl, present)
			}
		}
	}
	return items
}

// addSlot adds a slot's present keys to items, each item under
// copyChunkKeys keys and of one form.
func addSlot(items []item, t *tableState, sl, present uint64) []item {
	start := keyspace.SlotStart(sl)
	n := len(items)
	if present == ^uint64(0) {
		if n > 0 && items[n-1].keys.IsRuns() && items[n-1].keys.Len() < copyChunkKeys {
			if runs := items[n-1].keys.Runs(); runs[len(runs)-1].Hi == start {
				items[n-1].keys.AddRun(start, start+keyspace.SlotSize)
				return items
			}
		}
		return append(items, item{t: t, keys: keyspace.KeyRun(start, keyspace.SlotSize)})
	}
	if n == 0 || items[n-1].keys.IsRuns() || items[n-1].keys.Len() >= copyChunkKeys {
		items = append(items, item{t: t})
		n++
	}
	keys := items[n-1].keys.List()
	for b := present; b != 0; b &= b - 1 {
		keys = append(keys, start+uint64(bits.TrailingZeros64(b)))
	}
	items[n-1].keys = keyspace.KeyList(keys)
	return items
}
