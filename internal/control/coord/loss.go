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
	Epoch   uint64         `json:"epoch"`
	Lost    []api.PushRuns `json:"lost,omitempty"`
	Allowed []api.PushRuns `json:"allowed,omitempty"`
}

// pushSet indexes the runs of several fallbacks' LossSeen for lookups.
type pushSet map[seenKey]keyspace.SlotSet

type seenKey struct {
	client uint64
	table  uint32
	worker int
}

func keyOf(p api.PushRuns) seenKey { return seenKey{p.Client, p.Table, p.Worker} }

// addNew adds the pushes of p not in s yet, and returns them.
func (s pushSet) addNew(p api.PushRuns) keyspace.SlotSet {
	k := keyOf(p)
	fresh := keyspace.Subtract(p.Seqs, s[k])
	if len(fresh) > 0 {
		s[k] = keyspace.Union(s[k], fresh)
	}
	return fresh
}

func (s pushSet) list() []api.PushRuns {
	out := make([]api.PushRuns, 0, len(s))
	for k, sl := range s {
		out = append(out, api.PushRuns{Client: k.client, Table: k.table, Worker: k.worker, Seqs: sl})
	}
	slices.SortFunc(out, api.ComparePushRuns)
	return out
}

func (s pushSet) addAll(ps []api.PushRuns) {
	for _, p := range ps {
		k := keyOf(p)
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
	// count adds the pushes of rs not counted yet to total and byTable
	// (and to byWorker if it is not nil), and returns how many there were.
	count := func(rs []api.PushRuns, seen, fresh pushSet, total *int64, byTable *map[string]int64, byWorker map[string]map[int]int64) int64 {
		var n int64
		for _, p := range rs {
			add := seen.addNew(p)
			c := int64(add.Size())
			if c == 0 {
				continue
			}
			k := keyOf(p)
			fresh[k] = keyspace.Union(fresh[k], add)
			name := m.tableName(p.Table)
			if *byTable == nil {
				*byTable = map[string]int64{}
			}
			(*byTable)[name] += c
			if byWorker != nil {
				if byWorker[name] == nil {
					byWorker[name] = map[int]int64{}
				}
				byWorker[name][p.Worker] += c
			}
			n += c
		}
		*total += n
		return n
	}
	byWorker := map[string]map[int]int64{}
	for t, ws := range loss.ByWorker {
		byWorker[t] = maps.Clone(ws)
	}
	lost := count(r.Lost, seenLost, newLost, &loss.UpdatesLost, &loss.ByTable, byWorker)
	loss.ByWorker = byWorker
	allowed := count(r.Allowed, seenAllowed, newAllowed, &loss.UpdatesLostBound, &loss.BoundByTable, nil)
	loss.Reports++
	m.reported(r.From)
	m.rememberLoss(r.Epoch, at, LossSeen{Epoch: r.Epoch, Lost: newLost.list(), Allowed: newAllowed.list()})
	m.dirty = true
	m.note(api.EventLoss, r.From, fmt.Sprintf("fallback at epoch %d: %d acknowledged updates lost of %d allowed in the round at risk (%d and %d new); %d lost in all",
		r.Epoch, api.CountPushes(r.Lost), api.CountPushes(r.Allowed), lost, allowed, loss.UpdatesLost))
	m.log.Warn("acknowledged updates lost at a fallback", "backupps", r.From, "epoch", r.Epoch, "lost", api.CountPushes(r.Lost), "allowed", api.CountPushes(r.Allowed), "total", loss.UpdatesLost)
	m.reply(Reply{ID: id})
}

// ledgerGone counts the ledger of server lost when it dies or leaves
// before reporting the last fallback's loss (its report comes after a
// grace, server.DefaultFallbackGrace): the pushes it counted lost are
// missing from the count, which is then a lower bound, and said so.
func (m *Machine) ledgerGone(server, how string) {
	if !m.reported(server) {
		return
	}
	m.st.Loss.Unreported++
	m.dirty = true
	m.note(api.EventLoss, server, fmt.Sprintf("%s before its ledger reported the last fallback's loss: the count of acknowledged updates lost (%d) is short by what it held, a lower bound", how, m.st.Loss.UpdatesLost))
	m.log.Warn("a BackupPS's ledger is gone before its report: the count of updates lost at the fallback is a lower bound", "server", server, "how", how)
}

// reported takes server off the heads that owe the last fallback's
// report, and says whether it was one.
func (m *Machine) reported(server string) bool {
	if !slices.Contains(m.st.LossPending, server) {
		return false
	}
	m.st.LossPending = slices.DeleteFunc(slices.Clone(m.st.LossPending), func(s string) bool { return s == server })
	return true
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
