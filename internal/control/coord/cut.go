package coord

import (
	"fmt"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// Splitting a piece (docs/design/control.md): worker R asks for the tail
// of the piece that holds a row (Split); the coordinator records a pending
// cut on the piece; its holder V learns of it in its next Progress reply,
// picks the row q where it stops (at least the row asked for and the first
// it has not started) and reports it (Update.Cut); the piece then ends at
// q, and the rows [q, old end) become a new piece, granted to R if R still
// waits and holds nothing, or free in the pool otherwise. A cut that no
// request is pending for (dropped, timed out) makes a free piece too, so
// that the tail a holder gave up is never lost.

// Split answers api.Split (request id): it grants rank s.Rank the piece
// it already holds, or the free piece holding row s.From, or asks that
// piece's holder to cut it and waits; it fails with api.ErrNoSplit when
// that row is complete, or another split of its piece is pending.
func (m *Machine) Split(id uint64, s api.Split) {
	if err := m.checkRank(s.Rank); err != nil {
		m.fail(id, err)
		return
	}
	m.beat(s.Rank)
	// A worker asks for a split only once it stopped waiting for work; its
	// Acquire's cancel may reach us after this request, and a parked
	// Acquire answered then would grant the piece it is about to get again,
	// under a new grant number (docs/design/stragglers.md).
	m.dropAcquires(s.Rank)
	if s.Partition < 0 || s.Partition >= m.st.Layout.Partitions {
		m.fail(id, fmt.Errorf("%w: partition %d of %d", api.ErrBadRequest, s.Partition, m.st.Layout.Partitions))
		return
	}
	w := m.pass(s.Pass)
	noSplit := fmt.Errorf("%w: row %d of partition %d in pass %d", api.ErrNoSplit, s.From, s.Partition, s.Pass)
	if w == nil {
		m.fail(id, noSplit)
		return
	}
	if p, i := m.heldBy(w, s.Rank); p >= 0 {
		m.reply(Reply{ID: id, Grant: m.grant(w, p, i, s.Rank)}) // a grant it never received
		return
	}
	if s.AnyFree {
		if p, i := m.freePiece(w, s.Rank); p >= 0 {
			m.reply(Reply{ID: id, Grant: m.grant(w, p, i, s.Rank)})
			return
		}
	}
	i := slices.IndexFunc(w.Parts[s.Partition], func(pc Piece) bool { return !pc.Done && pc.contains(s.From) })
	if i < 0 {
		m.fail(id, noSplit)
		return
	}
	pc := &w.Parts[s.Partition][i]
	switch {
	case pc.Rank < 0:
		m.reply(Reply{ID: id, Grant: m.grant(w, s.Partition, i, s.Rank)})
		return
	case pc.Cut == nil:
		m.note(api.EventSplit, m.workerName(s.Rank), fmt.Sprintf("asks rank %d to cut pass %d partition %d piece %s from row %d", pc.Rank, s.Pass+1, s.Partition, pc, s.From))
		pc.Cut = &PendingCut{By: s.Rank, From: s.From}
		m.cutSince[cutKey{s.Pass, s.Partition, pc.Start}] = m.now
		m.changed(w, s.Partition)
		m.dirty = true
	case pc.Cut.By != s.Rank:
		m.fail(id, fmt.Errorf("%w: a split of piece %s is pending", noSplit, pc))
		return
	}
	// A request asked again (its first caller gave up) replaces the first.
	m.answerSplit(s.Rank, s.Pass, s.Partition, fmt.Errorf("%w: asked again", api.ErrNoSplit))
	m.waiting = append(m.waiting, waiter{id: id, rank: s.Rank, pass: s.Pass, split: &s})
}

// checkReport refuses a report that would break the pieces' tiling: a
// cut before the rows already trained or past the piece's end, a cut that
// moves state without the head's, an offset past the end. A cut before
// the row asked for is taken: the holder heard a peer's request (another
// thief's, or an earlier one of the asker's) before the coordinator's,
// and the tail, which starts where it cut, is only longer.
//
// (It was refused, and TestReassignOnCluster then failed a worker whose
// progress record carried such a cut.)
func (m *Machine) checkReport(pc *Piece, u api.Update) error {
	end := pc.End
	if c := u.Cut; c != nil && !c.Declined {
		switch {
		case c.At < pc.Offset || c.At < u.Offset || c.At < pc.Start:
			return fmt.Errorf("%w: cut of piece %s at row %d, before its trained rows (offset %d, reported %d)", api.ErrBadRequest, pc, c.At, pc.Offset, u.Offset)
		case pc.End != api.ToEnd && c.At > pc.End:
			return fmt.Errorf("%w: cut of piece %s at row %d, past its end", api.ErrBadRequest, pc, c.At)
		case c.HasState && !u.HasState:
			return fmt.Errorf("%w: a cut that gives away state must report the state it keeps", api.ErrBadRequest)
		}
		end = c.At
	}
	if end != api.ToEnd && u.Offset > end {
		return fmt.Errorf("%w: offset %d past the end %d of piece %s", api.ErrBadRequest, u.Offset, end, pc)
	}
	return nil
}

// cut applies a holder's answer to a split request on piece i of
// partition p (checked by checkReport); tail is the version of the tail's
// state.
func (m *Machine) cut(e int, w *Pass, p, i int, c *api.Cut, tail uint64) {
	pc := &w.Parts[p][i]
	asked := pc.Cut
	pc.Cut = nil
	m.changed(w, p)
	delete(m.cutSince, cutKey{e, p, pc.Start})
	if c.Declined || pc.End != api.ToEnd && c.At >= pc.End {
		m.unref(p, tail)
		if asked != nil {
			m.answerSplit(asked.By, e, p, fmt.Errorf("%w: the holder of piece %s declined", api.ErrNoSplit, pc))
		}
		return
	}
	t := Piece{Start: c.At, End: pc.End, Offset: c.At, Rank: -1}
	if c.HasState {
		t.States = []uint64{tail}
	} else {
		m.unref(p, tail)
	}
	m.log.Info("piece cut", "pass", e, "partition", p, "piece", pc.String(), "at", c.At, "holder", pc.Rank)
	pc.End = c.At
	w.Parts[p] = slices.Insert(w.Parts[p], i+1, t)
	m.changed(w, p)
	if asked == nil {
		return
	}
	k := slices.IndexFunc(m.waiting, func(x waiter) bool {
		return x.split != nil && x.rank == asked.By && x.pass == e && x.split.Partition == p
	})
	if k < 0 {
		return // the asker stopped waiting: the tail waits in the pool
	}
	wt := m.waiting[k]
	m.waiting = slices.Delete(m.waiting, k, k+1)
	if hp, _ := m.heldBy(w, asked.By); hp >= 0 {
		m.fail(wt.id, fmt.Errorf("%w: rank %d holds another piece", api.ErrNoSplit, asked.By))
		return
	}
	m.reply(Reply{ID: wt.id, Grant: m.grant(w, p, i+1, asked.By)})
	m.enter(asked.By)
}

// dropCut forgets the pending cut on pc, failing its asker's wait.
func (m *Machine) dropCut(e, p int, pc *Piece, why string) {
	m.log.Info("split request dropped", "pass", e, "partition", p, "piece", pc.String(), "by", pc.Cut.By, "why", why)
	m.answerSplit(pc.Cut.By, e, p, fmt.Errorf("%w: piece %s of partition %d: %s", api.ErrNoSplit, pc, p, why))
	delete(m.cutSince, cutKey{e, p, pc.Start})
	pc.Cut = nil
	m.changed(nil, p) // a cut does not change what is complete
	m.dirty = true
}

// answerSplit fails the waiting Split of rank in pass e, partition p.
func (m *Machine) answerSplit(rank, e, p int, err error) {
	m.waiting = slices.DeleteFunc(m.waiting, func(w waiter) bool {
		match := w.split != nil && w.rank == rank && w.pass == e && w.split.Partition == p
		if match {
			m.fail(w.id, err)
		}
		return match
	})
}

// expireCuts drops the pending cuts whose holder has not answered within
// the failure timeout: it may be blocked in a long minibatch, and the
// asker should not idle behind it.
func (m *Machine) expireCuts() {
	for _, k := range m.pendingCuts() {
		since, ok := m.cutSince[k]
		if !ok {
			m.cutSince[k], since = m.now, m.now
		}
		if m.now.Sub(since) < m.failureTimeout() {
			continue
		}
		pcs := m.st.Passes[k.pass].Parts[k.partition]
		i := slices.IndexFunc(pcs, func(pc Piece) bool { return pc.Start == k.start })
		m.dropCut(k.pass, k.partition, &pcs[i], "its holder did not answer within the failure timeout")
	}
}

// pendingCuts lists the pieces with a pending cut, in order.
func (m *Machine) pendingCuts() []cutKey {
	var ks []cutKey
	for _, e := range m.passNumbers() {
		for p, pcs := range m.st.Passes[e].Parts {
			for _, pc := range pcs {
				if pc.Cut != nil {
					ks = append(ks, cutKey{e, p, pc.Start})
				}
			}
		}
	}
	return ks
}

// dropAcquires fails the parked Acquires of rank: it asks for a split
// instead.
func (m *Machine) dropAcquires(rank int) {
	m.waiting = slices.DeleteFunc(m.waiting, func(w waiter) bool {
		if w.split != nil || w.rank != rank {
			return false
		}
		m.fail(w.id, fmt.Errorf("%w: rank %d asked for a split instead", api.ErrNoSplit, rank))
		return true
	})
}
