package copies

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
)

// keepPlacements bounds the placements an account remembers for rebuild
// reports: a head reports its rebuild for a layout within moments of
// installing it, and rebuilds run in layout order, so a report for an
// older placement is one whose head fell behind by that many placement
// changes; it is ignored, which can only leave slots counted at risk.
const keepPlacements = 8

// Arc is the slots whose hashes (ring.SlotHash) lie in [Lo, Hi], and the
// servers that hold a complete copy of them: one with every update
// acknowledged there.
type Arc struct {
	Lo      uint64   `json:"lo"`
	Hi      uint64   `json:"hi"`
	Holders []string `json:"holders,omitempty"`
	// Gone are the servers that held a complete copy since the slots last
	// had one on every member of their chains, and left the chain: with
	// Holders, those whose failures a loss is of.
	Gone []string `json:"gone,omitempty"`
}

// Placement is what of a layout places slots: the ring's servers, and
// while servers join or leave the final ring's, with k. Version is the
// first layout version that placed slots so.
type Placement struct {
	Version uint64   `json:"version"`
	Servers []string `json:"servers"`
	Final   []string `json:"final,omitempty"`
	K       int      `json:"k"`
	VNodes  int      `json:"vnodes,omitempty"`
	// Tiered: the layout has BackupPS (stage 2 or 3), which hold every
	// slot too, asynchronously (docs/design/tiers.md).
	Tiered bool `json:"tiered,omitempty"`
	// Job is the layout's job; Empty: it has no table, so no slot holds
	// anything yet. A job's tables are new (nextjob.go): what the slots
	// held under another job is no longer owed.
	Job   uint64 `json:"job,omitempty"`
	Empty bool   `json:"empty,omitempty"`
}

// Saved is an account as the coordinator saves it: bounded by the arcs
// that have fewer holders than members (none once every rebuild is
// reported), not by the ring.
type Saved struct {
	Ready      bool        `json:"ready,omitempty"`
	Placements []Placement `json:"placements,omitempty"`
	AtRisk     []Arc       `json:"at_risk,omitempty"`
}

// Account follows which servers hold a complete copy of each slot. Its
// arcs cover every hash once, in order; it is not safe for concurrent use.
type Account struct {
	ready      bool
	placements []Placement
	arcs       []Arc // by Hi; arc i starts after arc i-1's Hi
	built      map[uint64]*rings
}

// rings are a placement's maps.
type rings struct {
	ring, final *ring.Map
	k           int
}

// Loss is what a layout's change took every copy of.
type Loss struct {
	// Arcs are the slots that lost every copy; their Holders are the
	// servers that held the copies lost (the last ones, and those gone
	// before them since the slots last had every copy).
	Arcs []Arc
}

// New returns the account of a cluster that holds nothing yet.
func New() *Account { return &Account{built: map[uint64]*rings{}} }

func placementOf(l *layout.Layout) Placement {
	p := Placement{Version: l.Version, K: l.K(), VNodes: l.VNodes, Tiered: len(l.Backup) > 0, Job: l.Job, Empty: len(l.Tables) == 0}
	for _, s := range l.Servers {
		p.Servers = append(p.Servers, s.ID)
	}
	if len(l.Joining) > 0 || len(l.Leaving) > 0 {
		for _, s := range l.Servers {
			if !slices.Contains(l.Leaving, s.ID) {
				p.Final = append(p.Final, s.ID)
			}
		}
		for _, s := range l.Joining {
			p.Final = append(p.Final, s.ID)
		}
	}
	return p
}

func samePlacement(a, b Placement) bool {
	return slices.Equal(a.Servers, b.Servers) && slices.Equal(a.Final, b.Final) && a.K == b.K && a.VNodes == b.VNodes && a.Tiered == b.Tiered &&
		a.Job == b.Job && a.Empty == b.Empty
}

func mapOf(ids []string, vnodes int) (*ring.Map, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	servers := make([]ring.Server, len(ids))
	for i, id := range ids {
		servers[i] = ring.Server{ID: id}
	}
	return ring.New(0, servers, vnodes)
}

// ringsOf builds (once) the maps of placement p.
func (a *Account) ringsOf(p Placement) (*rings, error) {
	if r := a.built[p.Version]; r != nil {
		return r, nil
	}
	rm, err := mapOf(p.Servers, p.VNodes)
	if err != nil {
		return nil, fmt.Errorf("copies: placement of version %d: %w", p.Version, err)
	}
	final, err := mapOf(p.Final, p.VNodes)
	if err != nil {
		return nil, fmt.Errorf("copies: final ring of version %d: %w", p.Version, err)
	}
	r := &rings{ring: rm, final: final, k: p.K}
	a.built[p.Version] = r
	return r, nil
}

// members returns the servers that must hold the slots of hash h: their
// chain on the ring, and while servers join or leave their chain on the
// final ring too (as the servers' own chains count them), sorted.
func (r *rings) members(h uint64) []string {
	var out []string
	for _, i := range r.ring.ChainAt(h, r.k, nil) {
		out = append(out, r.ring.Servers[i].ID)
	}
	if r.final != nil {
		for _, i := range r.final.ChainAt(h, r.k, nil) {
			if id := r.final.Servers[i].ID; !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (r *rings) head(h uint64) string { return r.ring.Servers[r.ring.ChainAt(h, 1, nil)[0]].ID }

// bounds are the hashes at which r's chains change.
func (r *rings) bounds() []uint64 {
	b := r.ring.Bounds()
	if r.final != nil {
		b = append(b, r.final.Bounds()...)
		slices.Sort(b)
		b = slices.Compact(b)
	}
	return b
}

// Layout follows a layout the coordinator is about to publish, and
// returns what it lost: a server that left a slot's chain (declared dead,
// drained, or moved by a join) no longer holds the slot, since its
// updates stop reaching it. A slot left with no holder lost every copy;
// its new head starts it again and holds it. Until the first ready
// layout, and while the job has no table, every member holds every slot
// (nothing was written); so does a layout of a new job, whose tables are
// new (the last job's model was the user's to export). With tiers
// (stage 2 or 3) the BackupPS hold every slot too: a slot whose ActivePS
// are all gone falls back to them, and their loss ledgers count what the
// fallback lost (docs/design/tiers.md), so it is not reported here.
func (a *Account) Layout(l *layout.Layout) (Loss, error) {
	if len(l.Servers) == 0 {
		return Loss{}, nil // the first layouts, before any server joined, place nothing
	}
	p := placementOf(l)
	var prev Placement
	if n := len(a.placements); n > 0 {
		prev = a.placements[n-1]
	}
	if len(a.placements) == 0 || !samePlacement(prev, p) {
		a.placements = append(a.placements, p)
		if n := len(a.placements) - keepPlacements; n > 0 {
			for _, old := range a.placements[:n] {
				delete(a.built, old.Version)
			}
			a.placements = slices.Delete(a.placements, 0, n)
		}
	}
	cur, err := a.ringsOf(a.latest())
	if err != nil {
		return Loss{}, err
	}
	if !a.ready || a.arcs == nil || prev.Empty || prev.Job != p.Job {
		a.arcs = nil
		a.refine(cur.bounds())
		for i := range a.arcs {
			a.arcs[i].Holders = cur.members(a.arcs[i].Hi)
		}
		a.ready = a.ready || l.Ready
		a.merge()
		return Loss{}, nil
	}
	return a.drop(cur, prev.Tiered || p.Tiered, func(id string, members []string) bool { return !slices.Contains(members, id) }), nil
}

// Restarted follows a server whose process restarted under its ID (a new
// incarnation joined): the new process holds nothing, though it may stay
// a member of its chains (it joins again). It returns what that lost.
func (a *Account) Restarted(id string) (Loss, error) {
	if !a.ready || len(a.placements) == 0 || a.arcs == nil {
		return Loss{}, nil
	}
	cur, err := a.ringsOf(a.latest())
	if err != nil {
		return Loss{}, err
	}
	return a.drop(cur, a.latest().Tiered, func(h string, _ []string) bool { return h == id }), nil
}

// Reset counts every member of the newest placement's chains as holding
// their slots: the live cluster loaded a checkpoint again (a rewind,
// docs/design/resilience.md), each server the slots of its chains, as a
// resume's servers do before the cluster forms.
func (a *Account) Reset() error {
	if len(a.placements) == 0 || a.arcs == nil {
		return nil
	}
	cur, err := a.ringsOf(a.latest())
	if err != nil {
		return err
	}
	a.arcs = nil
	a.refine(cur.bounds())
	for i := range a.arcs {
		a.arcs[i].Holders = cur.members(a.arcs[i].Hi)
	}
	a.merge()
	return nil
}

// drop takes the holders that gone selects off every arc, and returns the
// arcs it left with no holder (not reported with tiers); their head under
// cur starts them again.
func (a *Account) drop(cur *rings, tiered bool, gone func(id string, members []string) bool) Loss {
	a.refine(cur.bounds())
	var loss Loss
	for i := range a.arcs {
		arc := &a.arcs[i]
		members := cur.members(arc.Hi)
		had := arc.Holders
		arc.Holders = slices.DeleteFunc(slices.Clone(had), func(id string) bool { return gone(id, members) })
		for _, id := range had {
			if !slices.Contains(arc.Holders, id) && !slices.Contains(arc.Gone, id) {
				arc.Gone = append(arc.Gone, id)
				slices.Sort(arc.Gone)
			}
		}
		if len(arc.Holders) > 0 {
			settle(arc, members)
			continue
		}
		// A slot with no holder starts again at its head, which holds it
		// from then on, unless the head is what is gone (a restarted
		// server: the next layout takes it off the ring, and the slot
		// starts at its new head then).
		copies := arc.Gone
		arc.Holders, arc.Gone = nil, nil
		if h := cur.head(arc.Hi); !gone(h, members) {
			arc.Holders = []string{h}
		}
		settle(arc, members)
		if tiered || len(had) == 0 {
			continue
		}
		lost := a.span(i)
		lost.Holders, lost.Gone = copies, nil
		loss.Arcs = append(loss.Arcs, lost)
	}
	loss.Arcs = mergeArcs(loss.Arcs)
	a.merge()
	return loss
}

// Rebuilt follows server id's report that its rebuild for layout version
// ended: the members of the chains it heads under that layout, still
// members now, hold those slots from then on, provided it held them
// itself. It reports whether the account changed. A report from a server
// no longer placed is ignored (its copies may have failed rather than
// completed), and so is one for a layout older than the placements kept:
// either can only leave slots counted at risk.
func (a *Account) Rebuilt(id string, version uint64) (bool, error) {
	if !a.ready || len(a.placements) == 0 {
		return false, nil
	}
	latest := a.latest()
	if !slices.Contains(latest.Servers, id) && !slices.Contains(latest.Final, id) {
		return false, nil
	}
	i, _ := slices.BinarySearchFunc(a.placements, version+1, func(p Placement, v uint64) int {
		if p.Version < v {
			return -1
		}
		return 1
	})
	if i == 0 {
		return false, nil
	}
	then, err := a.ringsOf(a.placements[i-1])
	if err != nil {
		return false, err
	}
	cur, err := a.ringsOf(latest)
	if err != nil {
		return false, err
	}
	a.refine(cur.bounds())
	a.refine(then.bounds())
	changed := false
	for i := range a.arcs {
		arc := &a.arcs[i]
		if then.head(arc.Hi) != id || !slices.Contains(arc.Holders, id) {
			continue
		}
		now := cur.members(arc.Hi)
		for _, m := range then.members(arc.Hi) {
			if slices.Contains(now, m) && !slices.Contains(arc.Holders, m) {
				arc.Holders = append(arc.Holders, m)
				slices.Sort(arc.Holders)
				changed = true
			}
		}
		settle(arc, now)
	}
	a.merge()
	return changed, nil
}

// settle forgets the servers gone from arc once every member holds it.
func settle(arc *Arc, members []string) {
	if slices.Equal(arc.Holders, members) {
		arc.Gone = nil
	}
}

func (a *Account) latest() Placement { return a.placements[len(a.placements)-1] }

// span returns arc i with its bounds.
func (a *Account) span(i int) Arc {
	lo := uint64(0)
	if i > 0 {
		lo = a.arcs[i-1].Hi + 1
	}
	return Arc{Lo: lo, Hi: a.arcs[i].Hi, Holders: slices.Clone(a.arcs[i].Holders), Gone: slices.Clone(a.arcs[i].Gone)}
}

// refine splits the arcs so that each bound ends one.
func (a *Account) refine(bounds []uint64) {
	if a.arcs == nil {
		a.arcs = []Arc{{Hi: math.MaxUint64}}
	}
	out := make([]Arc, 0, len(a.arcs)+len(bounds))
	j := 0
	for _, arc := range a.arcs {
		for j < len(bounds) && bounds[j] < arc.Hi {
			if n := len(out); n == 0 || out[n-1].Hi < bounds[j] {
				out = append(out, Arc{Hi: bounds[j], Holders: slices.Clone(arc.Holders), Gone: slices.Clone(arc.Gone)})
			}
			j++
		}
		out = append(out, arc)
	}
	a.arcs = out
}

// merge joins neighbouring arcs with the same holders.
func (a *Account) merge() {
	out := a.arcs[:0]
	for _, arc := range a.arcs {
		if n := len(out); n > 0 && slices.Equal(out[n-1].Holders, arc.Holders) && slices.Equal(out[n-1].Gone, arc.Gone) {
			out[n-1].Hi = arc.Hi
			continue
		}
		out = append(out, arc)
	}
	a.arcs = out
}

// mergeArcs joins neighbouring spans with the same holders.
func mergeArcs(arcs []Arc) []Arc {
	var out []Arc
	for _, arc := range arcs {
		if n := len(out); n > 0 && out[n-1].Hi+1 == arc.Lo && slices.Equal(out[n-1].Holders, arc.Holders) && slices.Equal(out[n-1].Gone, arc.Gone) {
			out[n-1].Hi = arc.Hi
			continue
		}
		out = append(out, arc)
	}
	return out
}

// AtRisk returns the spans of slots held by fewer servers than their
// chains have members now (a rebuild not reported finished, or a slot
// started again after a loss), in order.
func (a *Account) AtRisk() ([]Arc, error) {
	if !a.ready || len(a.placements) == 0 {
		return nil, nil
	}
	cur, err := a.ringsOf(a.latest())
	if err != nil {
		return nil, err
	}
	a.refine(cur.bounds())
	var out []Arc
	for i := range a.arcs {
		if !slices.Equal(a.arcs[i].Holders, cur.members(a.arcs[i].Hi)) {
			out = append(out, a.span(i))
		}
	}
	a.merge()
	return mergeArcs(out), nil
}

// Save returns the account as the coordinator saves it.
func (a *Account) Save() (Saved, error) {
	risk, err := a.AtRisk()
	if err != nil {
		return Saved{}, err
	}
	return Saved{Ready: a.ready, Placements: slices.Clone(a.placements), AtRisk: risk}, nil
}

// Restore returns the account s saved: every arc not at risk is held by
// all its members under the newest placement.
func Restore(s Saved) (*Account, error) {
	a := New()
	a.ready, a.placements = s.Ready, slices.Clone(s.Placements)
	if len(a.placements) == 0 {
		return a, nil
	}
	cur, err := a.ringsOf(a.latest())
	if err != nil {
		return nil, err
	}
	a.refine(cur.bounds())
	for i := range a.arcs {
		a.arcs[i].Holders = cur.members(a.arcs[i].Hi)
	}
	for _, r := range s.AtRisk {
		if r.Lo > 0 {
			a.refine([]uint64{r.Lo - 1})
		}
		a.refine([]uint64{r.Hi})
		for i := range a.arcs {
			if sp := a.span(i); sp.Lo >= r.Lo && sp.Hi <= r.Hi {
				a.arcs[i].Holders, a.arcs[i].Gone = slices.Clone(r.Holders), slices.Clone(r.Gone)
			}
		}
	}
	a.merge()
	return a, nil
}

// Holders returns the servers that hold a complete copy of the slots of
// hash h, as the account knows.
func (a *Account) Holders(h uint64) []string {
	for _, arc := range a.arcs {
		if h <= arc.Hi {
			return slices.Clone(arc.Holders)
		}
	}
	return nil
}

// Contains reports whether some arc of arcs holds hash h.
func Contains(arcs []Arc, h uint64) bool {
	return slices.ContainsFunc(arcs, func(a Arc) bool { return h >= a.Lo && h <= a.Hi })
}

// SpreadSlots returns the slots among the first keyspace.SpreadSlots (the
// first 65,536 keys, placed one by one) whose hashes lie in arcs.
func SpreadSlots(arcs []Arc) []uint64 {
	var out []uint64
	for sl := uint64(0); sl < keyspace.SpreadSlots; sl++ {
		if Contains(arcs, ring.SlotHash(sl)) {
			out = append(out, sl)
		}
	}
	return out
}

// Share returns the share of all hashes that arcs cover: about the share
// of the slots beyond the first keyspace.SpreadSlots (placed by unit of
// 64 slots) they hold.
func Share(arcs []Arc) float64 {
	var s float64
	for _, a := range arcs {
		s += float64(a.Hi-a.Lo) + 1
	}
	return s / math.Pow(2, 64)
}

// Ranges writes slots (sorted) as ranges, "3, 7, 11-12", at most max of
// them and then how many more there are.
func Ranges(slots []uint64, max int) string {
	var b strings.Builder
	for i, n := 0, 0; i < len(slots); n++ {
		if n == max {
			fmt.Fprintf(&b, " and %d more slots", len(slots)-i)
			break
		}
		j := i
		for j+1 < len(slots) && slots[j+1] == slots[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", slots[i], slots[j])
		} else {
			fmt.Fprint(&b, slots[i])
		}
		i = j + 1
	}
	return b.String()
}
