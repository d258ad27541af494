package sim

import (
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/copies"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// KindCopies: the coordinator's report of slots that lost every copy
// differs from Copies.
const KindCopies = "the coordinator's report of lost slots differs from the simulation's"

// checkReportedLosses compares the slots the coordinator reported lost
// every copy of (its status: docs/design/resilience.md, "Slots that lost
// every copy") with Copies, over every slot Copies follows (every slot
// pushed to): each slot Copies says lost every copy must be reported, and
// no slot Copies says always kept one may be. It runs once the cluster
// has settled (the final read waits for no dead server in the layout),
// so the coordinator has taken off every server Copies counts dead. With
// tiers a slot whose ActivePS are all gone falls back to the BackupPS
// and the loss ledgers count it (LedgerCounts): the coordinator reports
// no such slot, and this check does not run.
func (c *Cluster) checkReportedLosses() {
	if c.cfg.Stage != 0 || c.coord == nil {
		return
	}
	st := c.coord.Status()
	var arcs []copies.Arc
	marks := make([]int64, len(st.SlotLosses)) // when Copies saw each loss's layout
	for i, l := range st.SlotLosses {
		marks[i] = c.markOf(l.Version)
		for _, a := range l.Arcs {
			arcs = append(arcs, copies.Arc{Lo: a.Lo, Hi: a.Hi})
		}
	}
	// writtenLost reports whether a loss reported slot sl, pushed to
	// before it: a slot first pushed to after the loss had nothing to
	// lose, though the coordinator, which sees no pushes, names every
	// slot of the arcs lost.
	writtenLost := func(sl uint64) bool {
		for i, l := range st.SlotLosses {
			if c.copies.TouchedBefore(sl, marks[i]) && slices.ContainsFunc(l.Arcs, func(a api.HashRange) bool {
				return copies.Contains([]copies.Arc{{Lo: a.Lo, Hi: a.Hi}}, ring.SlotHash(sl))
			}) {
				return true
			}
		}
		return false
	}
	// Only the last losses keep their slots in the status: with more, a
	// slot Copies says lost may be in an older one.
	complete := st.CopiesLost == len(st.SlotLosses)
	var missed, extra []uint64
	lostSlots := c.copies.Lost()
	for _, sl := range c.copies.Followed() {
		lost, reported := slices.Contains(lostSlots, sl), copies.Contains(arcs, ring.SlotHash(sl))
		switch {
		case lost && !reported && complete:
			missed = append(missed, sl)
		case reported && !lost && writtenLost(sl):
			extra = append(extra, sl)
		}
	}
	if len(missed) > 0 {
		c.Violate(KindCopies, "slots %v lost every copy and the coordinator did not report it (%d losses reported: %+v)", missed, st.CopiesLost, st.SlotLosses)
	}
	if len(extra) > 0 {
		c.Violate(KindCopies, "the coordinator reported slots %v lost, and a complete copy of each is left (%d losses reported: %+v)", extra, st.CopiesLost, st.SlotLosses)
	}
}

// Followed returns, in order, the slots the account follows: those
// pushed to.
func (c *Copies) Followed() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]uint64, 0, len(c.slots))
	for sl := range c.slots {
		out = append(out, sl)
	}
	slices.Sort(out)
	return out
}
