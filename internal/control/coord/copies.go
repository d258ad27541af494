package coord

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/copies"
	"github.com/terrace-ml/terrace/internal/placement/layout"
)

// Slots that lost every copy (docs/design/resilience.md): the machine
// follows, in a copies.Account, which servers hold a complete copy of
// which slots, from every layout it hands out and every rebuild a server
// reports finished, and reports, loudly, a layout that takes the last copy
// of some slots off.

// keepSlotLosses bounds the losses State.SlotLosses keeps for status:
// the timeline and the count (State.CopiesLost) have every one.
const keepSlotLosses = 8

// maxRanges bounds the ranges of slots a loss lists (SlotLoss.Spread):
// its arcs have them all.
const maxRanges = 24

// followCopies follows layout l, about to be handed out (nil if the
// layout did not change), in the account of copies, and reports the
// slots it took the last copy of, with those restarts took since the
// last Ready: under l, the layout that takes the restarted servers off.
func (m *Machine) followCopies(l *layout.Layout) {
	loss := m.restartLoss
	m.restartLoss = copies.Loss{}
	if l != nil {
		more, err := m.copies.Layout(l)
		if err != nil {
			// A layout the machine built has a valid ring: this cannot happen.
			m.log.Error("the account of copies cannot follow the layout: it counts nothing more", "version", l.Version, "err", err)
		}
		if r := l.Resume; r != nil && r.Rewind > 0 {
			// Every member loads the slots of its chains from the
			// checkpoint gone back to, as a resume's servers do before
			// the cluster forms: a server that left during the load
			// took nothing with it (reloadRewind).
			more = copies.Loss{}
			if err := m.copies.Reset(); err != nil {
				m.log.Error("the account of copies cannot count the slots loaded again", "err", err)
			}
		}
		m.copiesChanged = true
		loss.Arcs = append(loss.Arcs, more.Arcs...)
	} else {
		l = m.published
	}
	m.reportSlotLoss(loss, l)
}

// restartedCopies follows a server whose process restarted under its ID
// (a new incarnation joined): it holds nothing, though it joins again.
// What that lost is reported at the next Ready (followCopies).
func (m *Machine) restartedCopies(server string) {
	if m.rewinding() {
		return // the new process loads the checkpoint gone back to, as the others do
	}
	loss, err := m.copies.Restarted(server)
	if err != nil {
		m.log.Error("the account of copies cannot follow a restart", "server", server, "err", err)
		return
	}
	m.copiesChanged, m.dirty = true, true
	m.restartLoss.Arcs = append(m.restartLoss.Arcs, loss.Arcs...)
}

// reportSlotLoss reports loss, found under layout l (its version and
// epoch; a restart's loss is the published layout's until the next).
func (m *Machine) reportSlotLoss(loss copies.Loss, l *layout.Layout) {
	if len(loss.Arcs) == 0 {
		return
	}
	m.dirty = true
	slices.SortFunc(loss.Arcs, func(a, b copies.Arc) int { return cmp.Compare(a.Lo, b.Lo) })
	var servers []string
	var arcs []api.HashRange
	for _, a := range loss.Arcs {
		for _, h := range a.Holders {
			if !slices.Contains(servers, h) {
				servers = append(servers, h)
			}
		}
		arcs = append(arcs, api.HashRange{Lo: a.Lo, Hi: a.Hi})
	}
	slices.Sort(servers)
	spread := copies.SpreadSlots(loss.Arcs)
	sl := api.SlotLoss{Time: m.now, Epoch: l.Epoch, Version: l.Version, Servers: servers, Spread: copies.Ranges(spread, maxRanges),
		SpreadCount: len(spread), Share: copies.Share(loss.Arcs), Arcs: arcs}
	m.st.CopiesLost++
	m.st.SlotLosses = append(slices.Clone(m.st.SlotLosses), sl)
	if n := len(m.st.SlotLosses) - keepSlotLosses; n > 0 {
		m.st.SlotLosses = slices.Delete(m.st.SlotLosses, 0, n)
	}
	m.note(api.EventLost, strings.Join(servers, ","), describeSlotLoss(sl, l.K()))
	m.log.Warn("every copy of some slots is lost: their acknowledged updates are gone", "servers", servers, "version", l.Version,
		"spread_slots", sl.SpreadCount, "slots", sl.Spread, "share", sl.Share, "k", l.K())
	m.rewindOnLoss(l.Version)
}

// describeSlotLoss is the timeline's account of a loss.
func describeSlotLoss(sl api.SlotLoss, k int) string {
	slots := "no slot of the first 1024"
	if sl.SpreadCount > 0 {
		slots = fmt.Sprintf("%d slots of the first 1024 (%s)", sl.SpreadCount, sl.Spread)
	}
	return fmt.Sprintf("every copy of %s and of %.2f%% of the ring beyond them is lost, with the acknowledged updates they held: %s held the copies (k=%d) and left the layout before a new copy was complete; their new heads start them empty",
		slots, 100*sl.Share, strings.Join(sl.Servers, " and "), k)
}

// Rebuilt records server r.From's report that its rebuild for layout
// r.Version ended: the new members of the chains it heads hold their
// slots. A report again, or one that changes nothing, saves nothing.
func (m *Machine) Rebuilt(id uint64, r api.Rebuilt) {
	changed, err := m.copies.Rebuilt(r.From, r.Version)
	if err != nil {
		m.log.Error("the account of copies cannot follow a rebuild", "server", r.From, "version", r.Version, "err", err)
	}
	if changed {
		m.copiesChanged, m.dirty = true, true
		m.log.Info("a rebuild is reported finished: its new chain members hold their slots", "server", r.From, "version", r.Version)
	}
	m.reply(Reply{ID: id})
}

// saveCopies puts the account of copies in the state about to be saved,
// if it changed since the last save.
func (m *Machine) saveCopies() {
	if !m.copiesChanged {
		return
	}
	m.copiesChanged = false
	s, err := m.copies.Save()
	if err != nil {
		m.log.Error("the account of copies cannot be saved", "err", err)
		return
	}
	m.st.Copies = s
}

// numberSlotLoss gives the loss recorded under layout version the epoch
// the store numbered.
func (m *Machine) numberSlotLoss(version, epoch uint64) {
	for i := range m.st.SlotLosses {
		if m.st.SlotLosses[i].Version == version {
			m.st.SlotLosses[i].Epoch = epoch
		}
	}
}
