package coord

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// DefaultFailureTimeout is how long a node may stay silent before the
// coordinator declares it dead (Options.FailureTimeout): a worker's pieces
// are then taken back and its clock stops holding the others; a server
// leaves the ring.
const DefaultFailureTimeout = layout.DefaultFailureTimeout

// maxTickEvery bounds the driver's tick, which is otherwise a quarter of
// the failure timeout: a suspect (half a timeout) or a silent worker is
// judged at most this late, as under the 1 s timeout this was written for.
const maxTickEvery = 250 * time.Millisecond

// suspect is a worker that may have died at at, judged half a failure
// timeout later: dead unless heard of since. Two things make one: the
// end of its etcd registration (MemberGone, which id answers) and the
// close of the connection its last heartbeat came on
// (HeartbeatConnClosed, id 0: nobody waits).
type suspect struct {
	id     uint64
	rank   int
	worker string
	inc    string // the incarnation it joined with ("" without etcd)
	at     time.Time
	why    string // "etcd registration ended", "heartbeat connection closed"
	heard  bool   // a heartbeat came after the suspicion
}

// SetNow moves the machine's clock to now (it never goes back), without
// acting on timeouts: the driver sets the time of every event, so that a
// heartbeat that arrives late still counts if no Tick has judged its
// worker yet.
func (m *Machine) SetNow(now time.Time) {
	if now.After(m.now) {
		m.now = now
	}
}

// Tick moves the machine's clock to now and acts on what timed out:
// workers silent for the failure timeout, suspects that stayed silent,
// split requests their holder did not answer.
func (m *Machine) Tick(now time.Time) {
	m.SetNow(now)
	m.expireWorkers()
	m.judgeSuspects()
	m.expireCuts()
	m.returnToTiers()
}

// Heartbeat records that rank is alive. It is answered at once: it
// changes nothing that is saved, and a heartbeat that waited for a save
// would make its worker look silent.
func (m *Machine) Heartbeat(rank int, clock int64) error {
	if err := m.checkRank(rank); err != nil {
		return err
	}
	m.beat(rank)
	if clock > 0 {
		m.noteClock(rank, clock, true)
	}
	return nil
}

func (m *Machine) beat(rank int) {
	m.beats[rank] = m.now
	for i := range m.suspects {
		if m.suspects[i].rank == rank {
			m.suspects[i].heard = true
		}
	}
}

func (m *Machine) checkRank(rank int) error {
	if rank < 0 || rank >= m.st.Layout.Workers {
		return fmt.Errorf("%w: rank %d of %d", api.ErrBadRequest, rank, m.st.Layout.Workers)
	}
	if rank >= len(m.st.Workers) {
		// No worker holds the rank (yet): a request late from the job
		// before must not act for the next job's holder (nextJob).
		return fmt.Errorf("%w: rank %d: no worker joined with it", api.ErrBadRequest, rank)
	}
	if m.finished(rank) {
		return fmt.Errorf("%w: rank %d", api.ErrDeclaredDead, rank)
	}
	return nil
}

func (m *Machine) finished(rank int) bool { return slices.Contains(m.st.Layout.Finished, rank) }

// expireWorkers declares dead every worker silent for the failure timeout.
// A worker of a ready layout that has not been heard yet is timed from
// the first time this sees it: workers start heartbeats once the layout
// is ready, and one that died between its join and its first heartbeat
// would otherwise never be declared dead, its rank holding every SSP
// read at its clock forever (docs/design/sim.md).
func (m *Machine) expireWorkers() {
	if m.st.Layout.Ready {
		for _, r := range m.st.Workers {
			if _, heard := m.beats[r]; !heard && !m.finished(r) {
				m.beats[r] = m.now
			}
		}
	}
	ranks := make([]int, 0, len(m.beats))
	for r := range m.beats {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	changed := false
	for _, r := range ranks {
		silent := m.now.Sub(m.beats[r])
		if silent < m.failureTimeout() || m.finished(r) {
			continue
		}
		if _, reported := m.st.Reports[r]; !reported { // one that reported has finished and exited
			m.log.Warn("worker silent; its pieces return to the pool", "rank", r, "silent", silent.Round(time.Millisecond))
			m.note(api.EventFailed, m.workerName(r), fmt.Sprintf("worker silent for %v: its pieces return to the pool", silent.Round(time.Millisecond)))
		} else {
			m.log.Info("worker reported and exited", "rank", r)
		}
		m.finish(r)
		changed = true
	}
	if changed {
		m.publish()
	}
}

// Leave ends a worker's membership at once (a drained departure): its
// pieces return to the pool and its clock stops counting.
func (m *Machine) Leave(id uint64, rank int) {
	if rank < 0 || rank >= m.st.Layout.Workers {
		m.fail(id, fmt.Errorf("%w: rank %d of %d", api.ErrBadRequest, rank, m.st.Layout.Workers))
		return
	}
	if !m.finished(rank) {
		m.note(api.EventLeft, m.workerName(rank), "worker drained: progress recorded, leases returned")
		m.finish(rank)
		m.publish()
	}
	m.reply(Reply{ID: id})
}

// finish lists rank as finished, so that servers stop waiting for its
// clock, and returns its pieces to the pool at their recorded offsets,
// each with its own end. Its split requests, and those on its pieces, are
// dropped.
func (m *Machine) finish(rank int) {
	m.st.Layout.Finished = append(slices.Clone(m.st.Layout.Finished), rank)
	for _, e := range m.passNumbers() {
		w := m.st.Passes[e]
		for p := range w.Parts {
			for i := range w.Parts[p] {
				pc := &w.Parts[p][i]
				if pc.Rank == rank {
					pc.Rank = -1
					m.changed(w, p)
				}
				if pc.Cut != nil && (pc.Rank < 0 || pc.Cut.By == rank) {
					m.dropCut(e, p, pc, "its holder or its asker is gone")
				}
			}
		}
	}
	m.waiting = slices.DeleteFunc(m.waiting, func(w waiter) bool {
		if w.rank == rank {
			m.fail(w.id, fmt.Errorf("%w: rank %d", api.ErrDeclaredDead, rank))
		}
		return w.rank == rank
	})
	m.dirty = true
}

// MemberGone is told that node role/id, incarnation inc, is no longer
// registered in etcd: its lease expired (the process died, or lost etcd)
// or was revoked (it left). That is a suspicion, which the coordinator's
// own evidence decides, because etcd can lose a live node's lease (its
// member died and an election ran longer than the TTL) and a node that
// lost only etcd still trains. A worker is declared dead if it has not
// been heard of within half the failure timeout after the news; a server,
// if a fresh dial fails (the Probe in Ready; Probed reports it). Nothing
// happens if inc is not the incarnation that joined last (the
// registration of a process that restarted since) or if the node is gone
// already. The reply says whether the node was taken out.
func (m *Machine) MemberGone(id uint64, role, node, inc string) {
	if !m.current(role, node, inc) {
		m.reply(Reply{ID: id})
		return
	}
	switch role {
	case api.RoleWorker:
		if r, ok := m.st.Workers[node]; ok && !m.finished(r) {
			m.suspects = append(m.suspects, suspect{id: id, rank: r, worker: node, inc: inc, at: m.now, why: "etcd registration ended"})
			return
		}
	case api.RoleServer:
		// Standby servers and BackupPS too (Monitor says why).
		all := m.st.Layout.AllServers()
		if i := slices.IndexFunc(all, func(s ring.Server) bool { return s.ID == node }); i >= 0 {
			m.out.Probes = append(m.out.Probes, Probe{ReqID: id, ID: node, Addr: all[i].Addr, Incarnation: inc})
			return
		}
	}
	m.reply(Reply{ID: id})
}

// HeartbeatConnClosed is told that the connection the last heartbeat of
// worker rank came on has closed. A killed process's connections close
// at once, where a live one closes a connection rarely (one the
// coordinator found idle, a request its worker gave up on) and then
// heartbeats on another within a fifth of the failure timeout. So this is
// a suspicion, judged as an ended etcd registration is, half a failure
// timeout later: the death of a process on a live machine is found in
// half a timeout, and only the silent case (a vanished machine, a
// stopped or starved process) waits the whole timeout.
func (m *Machine) HeartbeatConnClosed(rank int) {
	node := m.workerName(rank)
	if _, ok := m.st.Workers[node]; !ok || m.finished(rank) {
		return
	}
	if slices.ContainsFunc(m.suspects, func(s suspect) bool { return s.rank == rank && !s.heard }) {
		return
	}
	inc := m.st.Incarnations[api.RoleWorker+"/"+node]
	m.suspects = append(m.suspects, suspect{rank: rank, worker: node, inc: inc, at: m.now, why: "heartbeat connection closed"})
}

// judgeSuspects decides on every suspect whose grace has run out.
func (m *Machine) judgeSuspects() {
	grace := m.failureTimeout() / 2
	m.suspects = slices.DeleteFunc(m.suspects, func(s suspect) bool {
		if m.now.Sub(s.at) < grace {
			return false
		}
		r := s.rank
		_, reported := m.st.Reports[r]
		switch {
		case m.st.Incarnations[api.RoleWorker+"/"+s.worker] != s.inc || m.st.Workers[s.worker] != r || m.finished(r) || reported:
			m.answer(s.id, false) // gone already, or it finished its work and exited
		case s.heard || m.beats[r].After(s.at):
			m.log.Info("worker's "+s.why+", but it heartbeats: kept", "worker", s.worker, "rank", r)
			m.answer(s.id, false)
		default:
			m.log.Warn("worker's "+s.why+" and it is silent: its pieces return to the pool", "worker", s.worker, "rank", r)
			m.note(api.EventFailed, s.worker, "worker's "+s.why+" and it is silent")
			m.finish(r)
			m.publish()
			m.answer(s.id, true)
		}
		return true
	})
}

// answer replies to request id (none if 0) whether a node was taken out.
func (m *Machine) answer(id uint64, removed bool) {
	if id != 0 {
		m.reply(Reply{ID: id, Removed: removed})
	}
}

// Probed reports the dial that a Probe asked for: alive if the server
// answered.
func (m *Machine) Probed(p Probe, alive bool) {
	if alive {
		m.log.Info("server's etcd registration ended, but it answers: kept", "server", p.ID)
		m.reply(Reply{ID: p.ReqID})
		return
	}
	if !m.current(api.RoleServer, p.ID, p.Incarnation) || m.endedWithCluster(p.ID) {
		m.reply(Reply{ID: p.ReqID})
		return
	}
	if !m.removeServer(p.ID, p.Addr) {
		replaced := m.lastServerDown(p.ID, "lost its etcd registration and does not answer a dial")
		m.reply(Reply{ID: p.ReqID, Removed: replaced})
		return
	}
	m.log.Warn("server's etcd registration ended and it does not answer: removed from the layout", "server", p.ID, "addr", p.Addr)
	m.note(api.EventFailed, p.ID, "server's etcd registration ended and it does not answer a dial")
	m.reply(Reply{ID: p.ReqID, Removed: true})
}
