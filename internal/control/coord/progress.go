package coord

import (
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// Periodic progress (docs/design/control.md, "Periodic progress"). A
// worker records its offset every few minibatches, and a record is
// answered only once the state it changed is saved: a successor resumes
// a dead worker's piece from the last record the worker was told of, so
// that no row before it is trained again. A record that only moves an
// offset and the highest clock changes nothing else a successor needs.
// With ProgressGap set, such a record is saved with the next save, which
// is due ProgressGap after the last one began (at once if that is past,
// or with any other change before): its reply waits for that save, so
// nothing a client has seen is unsaved. Records arrive one at a time per
// worker, a reply releasing the next, so the gap bounds how many saves a
// second periodic progress costs, whatever the number of workers: one
// save carries every worker's record since the last. Each save is an
// etcd transaction and a WAL fdatasync; with lr's minibatches of well
// under a millisecond a worker recorded about 100 times a second.

// pace is a rank's last record: where and when.
type pace struct {
	pass, part, off int
	at              time.Time
}

// periodic reports whether a successful record on piece pc may wait for
// the next save: it carries no state, cut or completion (those change
// what a successor restores beyond an offset, or are waited for), and
// its piece will not end within two gaps. A worker ends a piece only
// once its last record is answered, so a parked record near the end
// holds the worker up: with lr's partitions trained in 20-60 ms here,
// every partition end waited for one, and a one-machine tiers job's
// passes (12 partitions) took 0.37 s instead of 0.25. The end is the piece's, or
// the partition's length seen when a piece running to it completed (so
// nothing waits in the first pass); the time to it is at the pace of
// the rank's last two records.
func (m *Machine) periodic(u api.Update, head, tail uint64, pc *Piece) bool {
	if m.cfg.ProgressGap <= 0 {
		return false
	}
	if m.paces == nil {
		m.paces, m.rows = map[int]pace{}, map[int]int{}
	}
	last, seen := m.paces[u.Rank]
	m.paces[u.Rank] = pace{pass: u.Pass, part: u.Partition, off: u.Offset, at: m.now}
	if u.Complete && pc.End == api.ToEnd {
		m.rows[u.Partition] = u.Offset
	}
	if u.Complete || u.Cut != nil || u.HasState || head != 0 || tail != 0 {
		return false
	}
	end, ok := pc.End, true
	if end == api.ToEnd {
		end, ok = m.rows[u.Partition]
	}
	dt := m.now.Sub(last.at)
	if !ok || !seen || last.pass != u.Pass || last.part != u.Partition || u.Offset <= last.off || dt <= 0 {
		return false
	}
	left := time.Duration(float64(end-u.Offset) / float64(u.Offset-last.off) * float64(dt))
	return left > 2*m.cfg.ProgressGap
}

// unpark makes the parked records' save due, with their replies, when a
// save goes out anyway or the gap since the last has passed.
func (m *Machine) unpark() {
	if len(m.parked) == 0 {
		return
	}
	if !m.dirty && m.now.Before(m.lastSave.Add(m.cfg.ProgressGap)) {
		return
	}
	m.dirty = true
	m.out.Replies = append(m.out.Replies, m.parked...)
	m.parked = nil
}

// SaveDue returns when periodic progress waiting for a save is due, and
// false if none waits: the driver calls Ready then.
func (m *Machine) SaveDue() (time.Time, bool) {
	if len(m.parked) == 0 {
		return time.Time{}, false
	}
	return m.lastSave.Add(m.cfg.ProgressGap), true
}
