package coord

import (
	"fmt"
	"slices"
	"sort"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// Data partitions are leased pass by pass, in pieces (api's doc): a
// worker asks for work (Acquire), trains its piece from the recorded
// offset, reports progress and completes it. A worker that stops
// heartbeating loses its pieces, which go back to the pool at their last
// recorded offset, so another worker trains the rest. When every
// partition of a pass is complete, asking for work answers "pass done" to
// everyone: that is the pass barrier, and it waits for no dead worker.

// waiter is a request parked until it can be answered: an Acquire while
// every piece left is held, or a Split until the holder cuts.
type waiter struct {
	id    uint64
	rank  int
	pass  int
	split *api.Split
}

// cutKey names a piece with a pending cut, for its deadline.
type cutKey struct{ pass, partition, start int }

// passNumbers lists the passes in the state, in order.
func (m *Machine) passNumbers() []int {
	es := make([]int, 0, len(m.st.Passes))
	for e := range m.st.Passes {
		es = append(es, e)
	}
	sort.Ints(es)
	return es
}

// pass returns pass e's pieces, made on first use with one piece per
// partition that starts from the partition's state; nil if e is complete
// and forgotten.
func (m *Machine) pass(e int) *Pass {
	if e < m.st.DoneBefore {
		return nil
	}
	if w := m.st.Passes[e]; w != nil {
		return w
	}
	parts := make([][]Piece, m.st.Layout.Partitions)
	for p := range parts {
		parts[p] = []Piece{freshPiece(m.st.PartStates[p])}
	}
	// Fresh pieces are in no record (parts.go): the blob's list of passes
	// says the pass began.
	w := newPass(parts)
	m.st.Passes[e] = w
	m.dirty = true
	return w
}

// Acquire leases rank a piece of a pass (request id): a piece still held
// by it (a grant it never received: the coordinator that made it failed
// before answering), or a free one, preferring the partitions that are
// rank's by default (p mod workers), so that data stays where it was while
// nothing fails. It waits while every piece left is held by a live
// worker, and while a checkpoint of an earlier pass is being taken.
func (m *Machine) Acquire(id uint64, a api.Acquire) {
	if err := m.checkRank(a.Rank); err != nil {
		m.fail(id, err)
		return
	}
	m.beat(a.Rank)
	if err := m.behind(a.Rank, a.Pass); err != nil {
		m.fail(id, err)
		return
	}
	if !m.tryAcquire(id, a.Rank, a.Pass) {
		m.waiting = append(m.waiting, waiter{id: id, rank: a.Rank, pass: a.Pass})
	}
}

// tryAcquire answers an Acquire if it can, and reports whether it did.
func (m *Machine) tryAcquire(id uint64, rank, e int) bool {
	if m.checkpointHolds(e) || m.st.Layout.Resume != nil && m.st.Layout.Resume.Rewind > 0 {
		// Going back to a checkpoint: no work until every server has
		// loaded it.
		return false
	}
	w := m.pass(e)
	if w == nil || w.left() == 0 {
		m.reply(Reply{ID: id, Grant: api.Grant{Partition: -1, End: api.ToEnd, Done: true, Clock: m.st.MaxClock}})
		return true
	}
	p, i := m.heldBy(w, rank)
	if p < 0 && m.trains(rank) {
		p, i = m.freePiece(w, rank)
	}
	if p < 0 {
		return false
	}
	m.reply(Reply{ID: id, Grant: m.grant(w, p, i, rank)})
	return true
}

// checkpointHolds says whether the checkpoint in progress holds the work
// of pass e. One at a boundary holds that pass's end (its barrier) and
// the next pass until it is committed, so that a run that ends right
// after it does not cut it short. One begun inside a pass holds no piece
// of it, only its end and what follows: the same reason, and the parts
// then hold no row of a later pass, which a resume would train again.
func (m *Machine) checkpointHolds(e int) bool {
	ck := m.st.Layout.Checkpoint
	switch {
	case ck == nil || e < ck.Pass:
		return false
	case m.st.Checkpoint.MidPass == nil:
		return true
	case e == ck.Pass:
		return false
	case e == ck.Pass+1:
		w := m.pass(e)
		return w == nil || w.left() == 0
	}
	return true
}

// heldBy finds the piece of w that rank holds; -1 if none. A rank holds
// at most one piece of a pass: the one its last grant gave it, which the
// index names unless it is no longer held.
func (m *Machine) heldBy(w *Pass, rank int) (int, int) {
	p, ok := w.holder[rank]
	if !ok {
		return -1, -1
	}
	if i := slices.IndexFunc(w.Parts[p], func(pc Piece) bool { return !pc.Done && pc.Rank == rank }); i >= 0 {
		return p, i
	}
	delete(w.holder, rank)
	return -1, -1
}

// freePiece finds a free piece of w for rank, in its own partitions (p
// mod workers) first, the first in row order; -1 if none is free. The
// index's lower bounds only rise here, past partitions without one, and
// fall where a piece is freed, so that a pass's searches look at each
// partition about once.
func (m *Machine) freePiece(w *Pass, rank int) (int, int) {
	n := max(1, m.st.Layout.Workers)
	if len(w.byClass) != n {
		w.byClass = make([]int, n) // the number of workers changed: from the start
		for c := range n {
			w.byClass[c] = c
		}
	}
	first := func(p int) int {
		return slices.IndexFunc(w.Parts[p], func(pc Piece) bool { return !pc.Done && pc.Rank < 0 })
	}
	c := rank % n
	for ; w.byClass[c] < len(w.Parts); w.byClass[c] += n {
		if p := w.byClass[c]; w.free[p] {
			return p, first(p)
		}
	}
	for ; w.firstFree < len(w.Parts); w.firstFree++ {
		if p := w.firstFree; w.free[p] {
			return p, first(p)
		}
	}
	return -1, -1
}

// grant leases piece i of partition p to rank under a new grant number.
func (m *Machine) grant(w *Pass, p, i, rank int) api.Grant {
	m.st.Grants++
	if m.st.TrainBegan.IsZero() {
		m.st.TrainBegan = m.now
	}
	pc := &w.Parts[p][i]
	pc.Rank, pc.Grant = rank, m.st.Grants
	m.changed(w, p)
	m.dirty = true
	m.note(api.EventGrant, m.workerName(rank), fmt.Sprintf("pass %d partition %d rows %s from %d", m.passOf(w)+1, p, pc, pc.Offset))
	return api.Grant{Partition: p, Start: pc.Start, Offset: pc.Offset, End: pc.End, States: slices.Clone(pc.States), Lease: pc.Grant}
}

// settle answers the parked Acquires that can be answered now.
func (m *Machine) settle() {
	m.waiting = slices.DeleteFunc(m.waiting, func(w waiter) bool {
		if w.split == nil && m.tryAcquire(w.id, w.rank, w.pass) {
			m.enter(w.rank)
			return true
		}
		return false
	})
}

// Cancel forgets request id: its caller stopped waiting. A pending cut it
// asked for stays, bounded by the failure timeout: the tail it makes goes
// to the pool.
func (m *Machine) Cancel(id uint64) {
	m.waiting = slices.DeleteFunc(m.waiting, func(w waiter) bool { return w.id == id })
}

// Progress records a holder's report on its piece (request id): the rows
// before u.Offset are trained, its pushes acknowledged, its clock is
// u.Clock; with u.HasState, version head holds its state as of u.Offset;
// with u.Cut, it answers a split request (cut.go), and version tail holds
// the tail's state. Versions the report does not make current are
// dropped. A report on a piece already complete changes nothing.
func (m *Machine) Progress(id uint64, u api.Update, head, tail uint64) {
	w, i, err := m.reportedPiece(u)
	if err == nil && i >= 0 {
		err = m.checkReport(&w.Parts[u.Partition][i], u)
	}
	if err != nil || i < 0 {
		m.unref(u.Partition, head, tail)
		m.reply(Reply{ID: id, Err: err, Progress: api.ProgressReply{End: api.ToEnd}})
		return
	}
	m.st.MaxClock = max(m.st.MaxClock, u.Clock)
	m.noteClock(u.Rank, u.Clock, false)
	lazy := m.periodic(u, head, tail, &w.Parts[u.Partition][i])
	if u.Cut != nil {
		m.cut(u.Pass, w, u.Partition, i, u.Cut, tail)
	}
	pc := &w.Parts[u.Partition][i]
	if u.Offset < pc.Offset {
		// A report that lost a race with a later one keeps neither its
		// offset nor its state.
		m.unref(u.Partition, head)
	} else {
		m.trained += int64(u.Offset - pc.Offset)
		m.st.Trained += int64(u.Offset - pc.Offset)
		if u.Offset > pc.Offset {
			m.st.TrainedAt = m.now
		}
		pc.Offset = u.Offset
		if u.HasState {
			old := pc.States
			pc.States = []uint64{head}
			m.unref(u.Partition, old...)
		}
	}
	m.changed(w, u.Partition)
	r := api.ProgressReply{End: pc.End}
	if len(pc.States) == 1 {
		r.State = pc.States[0]
	}
	if pc.Cut != nil {
		r.Cut = &api.CutRequest{From: pc.Cut.From}
	}
	if u.Complete {
		m.completePiece(u.Pass, w, u.Partition, i)
	}
	if lazy && r.Cut == nil {
		m.parked = append(m.parked, Reply{ID: id, Progress: r})
		return
	}
	m.dirty = true // a cut request goes out at once
	m.reply(Reply{ID: id, Progress: r})
}

// reportedPiece finds the piece u reports on: its index in w's partition,
// -1 (and no error) if the report is on a piece or partition already
// complete, an error if u.Rank does not hold it.
func (m *Machine) reportedPiece(u api.Update) (*Pass, int, error) {
	if err := m.checkRank(u.Rank); err != nil {
		return nil, -1, err
	}
	m.beat(u.Rank)
	if u.Partition < 0 || u.Partition >= m.st.Layout.Partitions {
		return nil, -1, fmt.Errorf("%w: partition %d of %d", api.ErrBadRequest, u.Partition, m.st.Layout.Partitions)
	}
	if u.Pass < m.st.DoneBefore {
		return nil, -1, nil
	}
	lost := fmt.Errorf("%w: no piece of partition %d of pass %d is leased to rank %d under grant %d", api.ErrLeaseLost, u.Partition, u.Pass, u.Rank, u.Lease)
	if u.Lease != 0 && u.Lease <= m.st.RewoundGrants {
		lost = fmt.Errorf("%w: grant %d of partition %d of pass %d was revoked (%s)", api.ErrRewound, u.Lease, u.Partition, u.Pass, m.st.LastRewind)
	}
	w := m.st.Passes[u.Pass]
	if w == nil {
		return nil, -1, lost
	}
	pcs := w.Parts[u.Partition]
	if i := slices.IndexFunc(pcs, func(pc Piece) bool {
		return !pc.Done && pc.Rank == u.Rank && (u.Lease == 0 || u.Lease == pc.Grant)
	}); i >= 0 {
		return w, i, nil
	}
	if w.complete(u.Partition) || u.Lease != 0 && slices.ContainsFunc(pcs, func(pc Piece) bool { return pc.Done && pc.Grant == u.Lease }) {
		return w, -1, nil
	}
	return nil, -1, lost
}

// completePiece marks a piece done; once its partition is complete, the
// pieces' states become the partition's, and once the pass is, it is
// forgotten and a checkpoint may begin.
func (m *Machine) completePiece(e int, w *Pass, p, i int) {
	pc := &w.Parts[p][i]
	pc.Done, pc.Rank = true, -1
	m.changed(w, p) // and its states, below, once it is complete
	if pc.Cut != nil {
		m.dropCut(e, p, pc, "its holder completed it first")
	}
	if !w.complete(p) {
		return
	}
	old := m.st.PartStates[p]
	var states []uint64
	for _, pc := range w.Parts[p] {
		states = append(states, pc.States...)
	}
	if len(states) > 0 {
		m.st.PartStates[p] = states
	} else {
		delete(m.st.PartStates, p)
	}
	m.unref(p, old...)
	if w.left() == 0 {
		m.note(api.EventPass, "", fmt.Sprintf("pass %d trained", e+1))
		m.retirePasses()
		m.startCheckpoint(e)
		m.publish()
	}
}

// retirePasses forgets complete passes, keeping only the first pass not
// complete (DoneBefore) and those after it: the saved state would
// otherwise grow with every pass, and it is rewritten on every change.
func (m *Machine) retirePasses() {
	for w := m.st.Passes[m.st.DoneBefore]; w != nil && w.left() == 0; w = m.st.Passes[m.st.DoneBefore] {
		delete(m.st.Passes, m.st.DoneBefore)
		m.st.DoneBefore++
		for p, pcs := range w.Parts {
			for _, pc := range pcs {
				m.unref(p, pc.States...)
			}
		}
	}
}
