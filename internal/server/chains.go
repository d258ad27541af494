package server

import (
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
)

// chains says, for the slots a server heads, which other servers must hold
// them: the next servers of the ring's chain, and any joining server that
// will hold the slot once it is on the ring.
type chains struct {
	version uint64
	k       int
	ring    *ring.Map // routing: heads
	final   *ring.Map // the ring with the joining servers in and the leaving out
	// moving lists the joining and leaving servers: while there are any,
	// a slot's members include its chain on the final ring.
	moving []string
}

func newChains(l *layout.Layout, rm *ring.Map) (chains, error) {
	final, err := l.Final()
	if err != nil {
		return chains{}, err
	}
	ch := chains{version: l.Version, k: l.K(), ring: rm, final: final, moving: slices.Clone(l.Leaving)}
	for _, j := range l.Joining {
		ch.moving = append(ch.moving, j.ID)
	}
	return ch, nil
}

func (ch chains) replicates() bool { return ch.ring != nil && (ch.k > 1 || len(ch.moving) > 0) }

// successors appends to dst the servers other than the head that must
// hold slot sl.
func (ch chains) successors(sl uint64, dst []ring.Server, scratch []int) ([]ring.Server, []int) {
	dst = dst[:0]
	if ch.ring == nil {
		return dst, scratch
	}
	scratch = ch.ring.Chain(sl, ch.k, scratch)
	head := ch.ring.Servers[scratch[0]].ID
	for _, i := range scratch[1:] {
		dst = append(dst, ch.ring.Servers[i])
	}
	if len(ch.moving) > 0 {
		// The servers that will hold the slot once the joiners are in and
		// the leavers out: a joiner, or the new holder of a leaver's slot.
		scratch = ch.final.Chain(sl, ch.k, scratch)
		for _, i := range scratch {
			if srv := ch.final.Servers[i]; srv.ID != head && !contains(dst, srv.ID) {
				dst = append(dst, srv)
			}
		}
	}
	return dst, scratch
}

// group is what one peer must receive of a push.
type group struct {
	peer  ring.Server
	items []dirty
}

// groups splits the keys of a push by the servers that must hold them.
func (ch chains) groups(t *tableState, ks keySet) map[string]*group {
	groups := map[string]*group{}
	var succ []ring.Server
	var scratch []int
	get := func(p ring.Server) *group {
		g := groups[p.ID]
		if g == nil {
			g = &group{peer: p}
			groups[p.ID] = g
		}
		return g
	}
	if ks.runs == nil {
		for i := 0; i < len(ks.keys); {
			sl := keyspace.Slot(ks.keys[i])
			j := i + 1
			for j < len(ks.keys) && keyspace.Slot(ks.keys[j]) == sl {
				j++
			}
			succ, scratch = ch.successors(sl, succ, scratch)
			for _, p := range succ {
				g := get(p)
				if len(g.items) == 0 {
					g.items = append(g.items, dirty{t: t})
				}
				g.items[0].keys = append(g.items[0].keys, ks.keys[i:j]...)
			}
			i = j
		}
		return groups
	}
	for _, r := range ks.runs {
		for lo := r[0]; lo < r[1]; {
			sl := keyspace.Slot(lo)
			hi := min(r[1], keyspace.SlotStart(sl+1))
			succ, scratch = ch.successors(sl, succ, scratch)
			for _, p := range succ {
				g := get(p)
				if n := len(g.items); n > 0 && g.items[n-1].keys == nil && g.items[n-1].lo+uint64(g.items[n-1].n) == lo {
					g.items[n-1].n += int(hi - lo)
				} else {
					g.items = append(g.items, dirty{t: t, lo: lo, n: int(hi - lo)})
				}
			}
			lo = hi
		}
	}
	return groups
}

// HandoffStats counts what rebuilds shipped: full copies of slots sent to
// servers that newly belong to their chains.
type HandoffStats struct {
	Keys, Bytes int64
	Seconds     float64
}

// rebuild sends, for every slot this server heads, a full copy to each
// server that belongs to the slot's chain now but did not before: a new
// successor after a failure (restoring k copies) or a joining server (the
// handoff's pre-copy); and for every slot it newly heads, to every member. Pushes keep flowing meanwhile: the copies read the
// current state when they are sent, and every later push to the slot goes
// to the new member too, in order on the same stream. When the copies a
// joiner needs are acknowledged, OnSynced reports it.
func (s *Server) rebuild(old, cur chains) {
	if old.ring == nil {
		s.reportSynced(cur)
		return
	}
	start := time.Now()
	s.mu.RLock()
	tables := make([]*tableState, 0, len(s.tables))
	for _, t := range s.tables {
		tables = append(tables, t)
	}
	me := cur.ring.Index(s.opts.ID)
	s.mu.RUnlock()
	if me < 0 {
		return
	}
	send := map[string]*copyPlan{}
	var newSucc, oldSucc []ring.Server
	var scratch []int
	var keys int64
	for _, t := range tables {
		t.store.Slots(func(sl, present uint64) {
			if cur.ring.SlotOwner(sl) != me {
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
			inherited := oldHead != s.opts.ID && cur.ring.Index(oldHead) < 0
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
	if len(send) == 0 {
		s.reportSynced(cur)
		return
	}
	var wg sync.WaitGroup
	var bytes int64
	for _, c := range send {
		r := s.replicatorFor(c.peer)
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
	s.handoff.Lock()
	s.handoffStats.Keys += keys
	s.handoffStats.Bytes += bytes
	s.handoffStats.Seconds += time.Since(start).Seconds()
	s.handoff.Unlock()
	s.log.Info("rebuilt chain members", "keys", keys, "bytes", bytes, "seconds", time.Since(start).Seconds())
	s.reportSynced(cur)
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

// Handoff returns what this server's rebuilds have shipped.
func (s *Server) Handoff() HandoffStats {
	s.handoff.Lock()
	defer s.handoff.Unlock()
	return s.handoffStats
}

func contains(ps []ring.Server, id string) bool {
	for _, p := range ps {
		if p.ID == id {
			return true
		}
	}
	return false
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
func (c *copyPlan) add(t *tableState, sl uint64, n int) {
	last := len(c.chunks) - 1
	if last < 0 || c.chunks[last].t != t || c.chunks[last].keys >= copyChunkKeys {
		c.chunks = append(c.chunks, &chunk{slotCopy: slotCopy{t: t}})
		last++
	}
	c.chunks[last].slots.Add(sl)
	c.chunks[last].keys += n
}

// addSlot adds a slot's present keys to the copy for g's peer: a full slot
// extends a run of consecutive keys (sent as a range, without a key list),
// a partial one goes on a key list; chunks stay under copyChunkKeys.
func (g *group) addSlot(t *tableState, sl, present uint64) {
	start := keyspace.SlotStart(sl)
	n := len(g.items)
	if present == ^uint64(0) {
		if n > 0 && g.items[n-1].t == t && g.items[n-1].keys == nil && g.items[n-1].lo+uint64(g.items[n-1].n) == start && g.items[n-1].n < copyChunkKeys {
			g.items[n-1].n += keyspace.SlotSize
			return
		}
		g.items = append(g.items, dirty{t: t, lo: start, n: keyspace.SlotSize})
		return
	}
	if n == 0 || g.items[n-1].t != t || g.items[n-1].keys == nil || len(g.items[n-1].keys) >= copyChunkKeys {
		g.items = append(g.items, dirty{t: t, keys: []uint64{}})
		n++
	}
	it := &g.items[n-1]
	for b := present; b != 0; b &= b - 1 {
		it.keys = append(it.keys, start+uint64(bits.TrailingZeros64(b)))
	}
}

func (d dirty) len() int {
	if d.keys != nil {
		return len(d.keys)
	}
	return d.n
}
