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

// periodic reports whether a successful record may wait for the next
// save: it carries no state, cut or completion (those change what a
// successor restores beyond an offset, or are waited for).
func (m *Machine) periodic(u api.Update, head, tail uint64) bool {
	return m.cfg.ProgressGap > 0 && !u.Complete && u.Cut == nil && !u.HasState && head == 0 && tail == 0
}

// unpark makes the parked records' save due, with their replies, when a
// save goes out anyway or the gap since the last has passed.
func (m *Machine) unpark() {
	if !m.lazy {
		return
	}
	if !m.dirty && m.now.Before(m.lastSave.Add(m.cfg.ProgressGap)) {
		return
	}
	m.dirty, m.lazy = true, false
	m.out.Replies = append(m.out.Replies, m.parked...)
	m.parked = nil
}

// SaveDue returns when periodic progress waiting for a save is due, and
// false if none waits: the driver calls Ready then.
func (m *Machine) SaveDue() (time.Time, bool) {
	if !m.lazy {
		return time.Time{}, false
	}
	return m.lastSave.Add(m.cfg.ProgressGap), true
}
