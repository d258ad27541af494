package coord

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/keyspace"
)

// The loss ledger's count (issue 11 and 15, docs/design/tiers.md, "Bulk
// revocation"): each BackupPS that a fallback made a head reports the
// pushes its ledger allowed in the rounds that never became durable there
// and those of them lost; the coordinator counts each push once, though
// a push whose keys fell in the slots of two heads is in both reports.

// lossSeenFallbacks is how many fallbacks' counted pushes the state keeps
// (State.LossSeen). A fallback's reports arrive within the BackupPS's
// grace of it, and a second fallback within that grace reports both
// (server.ledger.freeze), so a push can be reported again only under the
// last fallback or two: more is kept, not all, so that the saved state
// does not grow with the job.
const lossSeenFallbacks = 4

// LossSeen are the pushes the reports of one fallback (by the epoch of
// its first report) counted, saved with the state so that a new leader
// counts a push once too, though the report naming it again reaches it
// after the one its predecessor counted.
type LossSeen struct {
	Epoch   uint64       `json:"epoch"`
	Lost    []SeenPushes `json:"lost,omitempty"`
	Allowed []SeenPushes `json:"allowed,omitempty"`
}

// SeenPushes are one client's pushes to one table counted, as runs of
// sequence numbers (a client's pushes lost at a fallback are mostly
// consecutive: those of the last sync interval).
type SeenPushes struct {
	Client uint64           `json:"client"`
	Table  uint32           `json:"table"`
	Worker int              `json:"worker"`
	Seqs   keyspace.SlotSet `json:"seqs"`
}

// pushSet indexes the runs of several fallbacks' LossSeen for lookups.
type pushSet map[seenKey]keyspace.SlotSet

type seenKey struct {
	client uint64
	table  uint32
	worker int
}

func (s pushSet) has(p api.LostPush) bool {
	return s[seenKey{p.Client, p.Table, p.Worker}].Contains(p.Seq)
}

func (s pushSet) add(p api.LostPush) {
	k := seenKey{p.Client, p.Table, p.Worker}
	sl := s[k]
	sl.Add(p.Seq)
	s[k] = sl
}

func (s pushSet) list() []SeenPushes {
	out := make([]SeenPushes, 0, len(s))
	for k, sl := range s {
		out = append(out, SeenPushes{Client: k.client, Table: k.table, Worker: k.worker, Seqs: sl})
	}
	slices.SortFunc(out, func(a, b SeenPushes) int {
		return cmp.Or(cmp.Compare(a.Client, b.Client), cmp.Compare(a.Table, b.Table), cmp.Compare(a.Worker, b.Worker))
	})
	return out
}

func (s pushSet) addAll(ps []SeenPushes) {
	for _, p := range ps {
		k := seenKey{p.Client, p.Table, p.Worker}
		s[k] = keyspace.Union(s[k], p.Seqs)
	}
}

// seen returns the pushes counted as lost and as allowed at the fallbacks
// remembered, and the index of the fallback of epoch in st.LossSeen (-1
// if none).
func (st *State) seen(epoch uint64) (lost, allowed pushSet, at int) {
	lost, allowed, at = pushSet{}, pushSet{}, -1
	for i, f := range st.LossSeen {
		lost.addAll(f.Lost)
		allowed.addAll(f.Allowed)
		if f.Epoch == epoch {
			at = i
		}
	}
	return lost, allowed, at
}

// ReportLoss counts BackupPS r.From's report of a fallback, and notes it
// on the timeline.
func (m *Machine) ReportLoss(id uint64, r api.LossReport) {
	loss := &m.st.Loss
	loss.ByTable, loss.BoundByTable = maps.Clone(loss.ByTable), maps.Clone(loss.BoundByTable)
	seenLost, seenAllowed, at := m.st.seen(r.Epoch)
	newLost, newAllowed := pushSet{}, pushSet{}
	if at >= 0 {
		newLost.addAll(m.st.LossSeen[at].Lost)
		newAllowed.addAll(m.st.LossSeen[at].Allowed)
	}
	count := func(ps []api.LostPush, seen, fresh pushSet, total *int64, byTable *map[string]int64) []api.LostPush {
		var counted []api.LostPush
		for _, p := range ps {
			if seen.has(p) {
				continue
			}
			seen.add(p)
			fresh.add(p)
			counted = append(counted, p)
			if *byTable == nil {
				*byTable = map[string]int64{}
			}
			(*byTable)[m.tableName(p.Table)]++
		}
		*total += int64(len(counted))
		return counted
	}
	lost := count(r.Lost, seenLost, newLost, &loss.UpdatesLost, &loss.ByTable)
	byWorker := map[string]map[int]int64{}
	for t, ws := range loss.ByWorker {
		byWorker[t] = maps.Clone(ws)
	}
	for _, p := range lost {
		name := m.tableName(p.Table)
		if byWorker[name] == nil {
			byWorker[name] = map[int]int64{}
		}
		byWorker[name][p.Worker]++
	}
	loss.ByWorker = byWorker
	allowed := count(r.Allowed, seenAllowed, newAllowed, &loss.UpdatesLostBound, &loss.BoundByTable)
	loss.Reports++
	m.rememberLoss(r.Epoch, at, LossSeen{Epoch: r.Epoch, Lost: newLost.list(), Allowed: newAllowed.list()})
	m.dirty = true
	m.note(api.EventLoss, r.From, fmt.Sprintf("fallback at epoch %d: %d acknowledged updates lost of %d allowed in the round at risk (%d and %d new); %d lost in all",
		r.Epoch, len(r.Lost), len(r.Allowed), len(lost), len(allowed), loss.UpdatesLost))
	m.log.Warn("acknowledged updates lost at a fallback", "backupps", r.From, "epoch", r.Epoch, "lost", len(r.Lost), "allowed", len(r.Allowed), "total", loss.UpdatesLost)
	m.reply(Reply{ID: id})
}

// rememberLoss saves what the reports of the fallback of epoch counted
// (f; at is its place in LossSeen, -1 for a new fallback), forgetting the
// oldest fallback beyond lossSeenFallbacks.
func (m *Machine) rememberLoss(epoch uint64, at int, f LossSeen) {
	seen := slices.Clone(m.st.LossSeen)
	if at >= 0 {
		seen[at] = f
	} else {
		seen = append(seen, f)
		slices.SortFunc(seen, func(a, b LossSeen) int { return cmp.Compare(a.Epoch, b.Epoch) })
	}
	if n := len(seen) - lossSeenFallbacks; n > 0 {
		seen = slices.Delete(seen, 0, n)
	}
	m.st.LossSeen = seen
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
