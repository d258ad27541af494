package sim

import (
	"slices"
	"sync"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// Copies is the simulation's account, kept outside the code under test, of
// which servers hold a complete copy of each slot: one that has every
// update acknowledged there. It is what tells a loss the system caused from
// one no system with k copies could avoid (every copy of a slot gone before
// a new one was complete), so that checkers accept a loss only there.
//
// It follows four kinds of event:
//   - a layout the coordinator published: a server that leaves a slot's
//     chain (declared dead, drained, or moved by a join) stops holding it,
//     since the slot's updates stop reaching it; until the first ready
//     layout, every member holds every slot (all are empty);
//   - a server's death: it holds nothing more;
//   - a rebuild a head finished (server.Options.OnRebuilt): the members of
//     the chains it heads under that layout, still members now, hold those
//     slots from then on, provided the head held them itself;
//   - a layout that loads a checkpoint the cluster went back to
//     (layout.Checkpoint.Rewind): every live member holds its slots,
//     rolled back to the checkpoint on purpose, as the coordinator's
//     account counts them;
//   - a slot's first push (Touch): before it, a slot has nothing to lose,
//     and every live member of its chain holds it.
//
// A slot left with no holder has lost every copy at that event; its
// current head (once one is alive) starts it again, and holds it.
type Copies struct {
	mark func() int64 // numbers events in the book's sequence

	mu      sync.Mutex
	layouts map[uint64]*placement // by layout version
	latest  *placement
	ready   bool
	dead    map[string]bool
	slots   map[uint64]*slotCopies
	unknown int // rebuilds of layout versions never seen
}

type slotCopies struct {
	holders []string
	losses  []int64 // book events at which the slot lost every copy
	touched int64   // the book event of its first push
}

// placement is the chains of one layout.
type placement struct {
	version uint64
	ring    *ring.Map
	final   *ring.Map // nil unless servers are joining or leaving
	k       int
}

// NewCopies returns an empty account whose loss events are numbered by
// mark (Book.Mark).
func NewCopies(mark func() int64) *Copies {
	return &Copies{mark: mark, layouts: map[uint64]*placement{}, dead: map[string]bool{}, slots: map[uint64]*slotCopies{}}
}

func newPlacement(l *layout.Layout) (*placement, error) {
	rm, err := l.Ring()
	if err != nil {
		return nil, err
	}
	p := &placement{version: l.Version, ring: rm, k: l.K()}
	if len(l.Joining) > 0 || len(l.Leaving) > 0 {
		if p.final, err = l.Final(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// members returns the servers that must hold slot sl: its chain on the
// ring, and, while servers join or leave, its chain on the final ring (as
// the servers' own chains count them).
func (p *placement) members(sl uint64) []string {
	var out []string
	for _, i := range p.ring.Chain(sl, p.k, nil) {
		out = append(out, p.ring.Servers[i].ID)
	}
	if p.final != nil {
		for _, i := range p.final.Chain(sl, p.k, nil) {
			if id := p.final.Servers[i].ID; !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

func (p *placement) head(sl uint64) string { return p.ring.Servers[p.ring.SlotOwner(sl)].ID }

// Layout records a layout the coordinator published.
func (c *Copies) Layout(l *layout.Layout) error {
	if len(l.Servers) == 0 {
		return nil // the first layouts, before any server joined, place nothing
	}
	p, err := newPlacement(l)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.layouts[l.Version] = p
	c.latest = p
	for sl, s := range c.slots {
		if !c.ready {
			s.holders = c.aliveLocked(p.members(sl))
			continue
		}
		members := p.members(sl)
		c.dropLocked(sl, s, func(id string) bool { return !slices.Contains(members, id) })
		if l.Resume != nil && l.Resume.Rewind > 0 {
			// Gone back to a checkpoint: every member loads the slot
			// from it, and holds it (rolled back on purpose).
			s.holders = c.aliveLocked(members)
		}
	}
	c.ready = c.ready || l.Ready
	return nil
}

// Died records that server id is gone for good.
func (c *Copies) Died(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead[id] {
		return
	}
	c.dead[id] = true
	for sl, s := range c.slots {
		c.dropLocked(sl, s, func(h string) bool { return h == id })
	}
}

// dropLocked removes the holders of sl that gone selects, records a loss
// if that leaves none, and restarts a slot with no holder at its current
// head if it is alive.
func (c *Copies) dropLocked(sl uint64, s *slotCopies, gone func(string) bool) {
	had := len(s.holders)
	s.holders = slices.DeleteFunc(s.holders, gone)
	if len(s.holders) > 0 {
		return
	}
	if had > 0 {
		s.losses = append(s.losses, c.mark())
	}
	if c.latest != nil {
		if h := c.latest.head(sl); !c.dead[h] && !gone(h) {
			s.holders = []string{h}
		}
	}
}

// Rebuilt records that server id finished its rebuild for layout version
// (server.Options.OnRebuilt). A dead server's report is ignored: its
// copies may have failed rather than completed.
func (c *Copies) Rebuilt(id string, version uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead[id] || c.latest == nil {
		return
	}
	p := c.layouts[version]
	if p == nil {
		c.unknown++
		return
	}
	for sl, s := range c.slots {
		if p.head(sl) != id || !slices.Contains(s.holders, id) {
			continue
		}
		now := c.latest.members(sl)
		for _, m := range p.members(sl) {
			if !c.dead[m] && slices.Contains(now, m) && !slices.Contains(s.holders, m) {
				s.holders = append(s.holders, m)
			}
		}
	}
}

// Touch starts following slot sl, which is about to get its first push.
func (c *Copies) Touch(sl uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slots[sl] != nil || c.latest == nil {
		return
	}
	c.slots[sl] = &slotCopies{holders: c.aliveLocked(c.latest.members(sl)), touched: c.mark()}
}

// TouchedBefore reports whether slot sl got its first push before event.
func (c *Copies) TouchedBefore(sl uint64, event int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.slots[sl]
	return s != nil && s.touched < event
}

func (c *Copies) aliveLocked(ids []string) []string {
	return slices.DeleteFunc(ids, func(id string) bool { return c.dead[id] })
}

// WouldLose reports whether server id's death now would leave some slot
// with no complete copy.
func (c *Copies) WouldLose(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.slots {
		if len(s.holders) == 1 && s.holders[0] == id {
			return true
		}
	}
	return false
}

// Holders returns the servers that hold a complete copy of slot sl now.
func (c *Copies) Holders(sl uint64) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.slots[sl]; s != nil {
		return slices.Clone(s.holders)
	}
	return nil
}

// LossBefore returns the book event of the last time slot sl lost every
// copy before event, or 0 if it never did.
func (c *Copies) LossBefore(sl uint64, event int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.slots[sl]
	if s == nil {
		return 0
	}
	var last int64
	for _, l := range s.losses {
		if l < event {
			last = l
		}
	}
	return last
}

// Lost returns, in order, the slots that lost every copy at least once.
func (c *Copies) Lost() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []uint64
	for sl, s := range c.slots {
		if len(s.losses) > 0 {
			out = append(out, sl)
		}
	}
	slices.Sort(out)
	return out
}

// Unknown counts the rebuilds reported for layout versions this account
// never saw (their copies were not counted).
func (c *Copies) Unknown() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unknown
}
