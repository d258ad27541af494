package coord

import (
	"fmt"
	"maps"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// The loss ledger's count (issue 11 and 15, docs/design/tiers.md, "Bulk
// revocation"): each BackupPS that a fallback made a head reports the
// pushes its ledger allowed in the rounds that never became durable there
// and those of them lost; the coordinator counts each push once, though
// a push whose keys fell in the slots of two heads is in both reports.

// lossSeen are the pushes counted so far (not saved: a new leader may
// count a push again if a report reaches both leaders).
type lossSeen struct {
	lost, allowed map[api.LostPush]bool
}

// ReportLoss counts BackupPS r.From's report of a fallback, and notes it
// on the timeline.
func (m *Machine) ReportLoss(id uint64, r api.LossReport) {
	if m.losses.lost == nil {
		m.losses = lossSeen{lost: map[api.LostPush]bool{}, allowed: map[api.LostPush]bool{}}
	}
	loss := &m.st.Loss
	loss.ByTable, loss.BoundByTable = maps.Clone(loss.ByTable), maps.Clone(loss.BoundByTable)
	count := func(ps []api.LostPush, seen map[api.LostPush]bool, total *int64, byTable *map[string]int64) int64 {
		var n int64
		for _, p := range ps {
			if seen[p] {
				continue
			}
			seen[p] = true
			n++
			if *byTable == nil {
				*byTable = map[string]int64{}
			}
			(*byTable)[m.tableName(p.Table)]++
		}
		*total += n
		return n
	}
	before := maps.Clone(m.losses.lost)
	lost := count(r.Lost, m.losses.lost, &loss.UpdatesLost, &loss.ByTable)
	byWorker := map[string]map[int]int64{}
	for t, ws := range loss.ByWorker {
		byWorker[t] = maps.Clone(ws)
	}
	for _, p := range r.Lost {
		if before[p] {
			continue
		}
		before[p] = true
		name := m.tableName(p.Table)
		if byWorker[name] == nil {
			byWorker[name] = map[int]int64{}
		}
		byWorker[name][p.Worker]++
	}
	loss.ByWorker = byWorker
	allowed := count(r.Allowed, m.losses.allowed, &loss.UpdatesLostBound, &loss.BoundByTable)
	loss.Reports++
	m.dirty = true
	m.note(api.EventLoss, r.From, fmt.Sprintf("fallback at epoch %d: %d acknowledged updates lost of %d allowed in the round at risk (%d and %d new); %d lost in all",
		r.Epoch, len(r.Lost), len(r.Allowed), lost, allowed, loss.UpdatesLost))
	m.log.Warn("acknowledged updates lost at a fallback", "backupps", r.From, "epoch", r.Epoch, "lost", len(r.Lost), "allowed", len(r.Allowed), "total", loss.UpdatesLost)
	m.reply(Reply{ID: id})
}

// Loss returns what the ledgers counted so far.
func (m *Machine) Loss() api.Loss {
	l := m.st.Loss
	l.ByTable, l.BoundByTable = maps.Clone(l.ByTable), maps.Clone(l.BoundByTable)
	byWorker := map[string]map[int]int64{}
	for t, ws := range l.ByWorker {
		byWorker[t] = maps.Clone(ws)
	}
	if len(byWorker) > 0 {
		l.ByWorker = byWorker
	}
	return l
}

func (m *Machine) tableName(id uint32) string {
	for _, t := range m.st.Layout.Tables {
		if t.ID == id {
			return t.Spec.Name
		}
	}
	return fmt.Sprint("table ", id)
}
