package drill

import (
	"context"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// timeline copies the coordinator's event timeline, its samples of the
// cluster and its examples account into the report, while
// a coordinator still answers; a drill whose coordinators are all gone
// reports none.
func (d *drill) timeline(ctx context.Context) {
	if d.coord == "" {
		return
	}
	cc := api.NewClient(d.coord, nil)
	cc.RetryFor = 2 * time.Second
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	evs, err := cc.Events(ctx, 0, false)
	if err != nil {
		d.log.Warn("could not read the coordinator's event timeline", "err", err)
		return
	}
	d.rep.Events = evs
	if d.rep.History, err = cc.History(ctx); err != nil {
		d.log.Warn("could not read the coordinator's samples of the cluster", "err", err)
	}
	st, err := cc.Status(ctx)
	if err != nil {
		d.log.Warn("could not read the coordinator's status", "err", err)
		return
	}
	d.rep.Account = AccountOf(st.Job)
	d.rep.CopiesLost, d.rep.Rewinds = st.CopiesLost, st.Rewinds
	if st.CopiesLost > 0 && st.Rewinds == 0 {
		d.rep.note("every copy of some slots was lost %d time(s) (k servers at once; terrace events: kind lost): their acknowledged updates are gone", st.CopiesLost)
	}
	if st.Rewinds > 0 {
		d.rep.note("slots lost every copy %d time(s), and the cluster went back to its newest checkpoint %d time(s), the last %s: what was trained after it was dropped and trained again, and the audit counts the dropped updates as lost", st.CopiesLost, st.Rewinds, st.LastRewind)
	}
}

// ExamplesAccount is the coordinator's examples account of a job (ps's
// ExamplesTable, read after every pass by the worker that evaluates it):
// how many passes it covers, and the rows trained more or fewer times
// than once in them.
type ExamplesAccount struct {
	Passes   int   `json:"passes"`
	Repeated int64 `json:"repeated"`
	Skipped  int64 `json:"skipped"`
}

// AccountOf returns the account in a job's progress, nil if no pass is
// accounted.
func AccountOf(p api.Progress) *ExamplesAccount {
	if p.Accounted == 0 {
		return nil
	}
	return &ExamplesAccount{Passes: p.Accounted, Repeated: p.Repeated, Skipped: p.Skipped}
}
