package drill

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/ps"
)

// WorkerAudit is one worker's line of the accounting.
type WorkerAudit struct {
	Node string `json:"node,omitempty"`
	Rank int    `json:"rank"` // -1 if the worker died before it said
	// AckedLogged is how many audit increments the worker saw
	// acknowledged, as far as its log or report says.
	AckedLogged int64 `json:"acked_logged"`
	// ServerCount is the worker's counter in the audit table at the end.
	ServerCount int64 `json:"server_count"`
	// Finished is whether the worker trained to the end and reported;
	// only then is AckedLogged all its pushes.
	Finished bool `json:"finished"`
	// LogComplete is whether its log was closed (not cut by a kill).
	LogComplete bool `json:"log_complete"`
	// Lost is max(0, AckedLogged - ServerCount).
	Lost int64 `json:"lost"`
	// LedgerLost, on tiers after a revocation without notice, is the
	// BackupPS's loss ledgers' count of the worker's audit pushes lost:
	// equal to Lost for a worker that survived, and at least Lost, by the
	// pushes in flight when it died, for one that did not.
	LedgerLost *int64 `json:"ledger_lost,omitempty"`
}

// Accounting is what the audit tables say about a run.
type Accounting struct {
	// AckedUpdatesLost is the sum over workers of the acknowledged audit
	// increments the audit table does not hold.
	AckedUpdatesLost int64
	// AckedUpdatesDuplicated is the sum over finished workers of the
	// increments the table holds beyond those acknowledged: an update
	// applied twice. (A worker that was stopped may have had pushes applied
	// but not yet acknowledged, so it is left out.)
	AckedUpdatesDuplicated int64
	// ExamplesRepeated and ExamplesSkipped sum, over training rows, how
	// many times more or fewer than passes the row was trained.
	ExamplesRepeated, ExamplesSkipped int64
	// ExamplesAudited is how many example trainings the table counted.
	ExamplesAudited int64
	// RowsSkipped is how many rows were trained fewer than passes times.
	RowsSkipped int64
	// Off lists the first maxOff rows trained other than passes times.
	Off []RowCount
}

// RowCount is how many times a training row was trained.
type RowCount struct {
	Row   int   `json:"row"`
	Count int64 `json:"count"`
}

const maxOff = 64

// Account compares the workers' logged counts with the audit table's
// counters (perWorker, by rank) and the trained table's counts (perRow)
// with passes. It fills each worker's ServerCount and Lost.
func Account(workers []WorkerAudit, perWorker, perRow []float32, passes int) Accounting {
	var a Accounting
	for i := range workers {
		w := &workers[i]
		if w.Rank >= 0 && w.Rank < len(perWorker) {
			w.ServerCount = int64(perWorker[w.Rank])
		}
		w.Lost = max(0, w.AckedLogged-w.ServerCount)
		a.AckedUpdatesLost += w.Lost
		if w.Finished {
			a.AckedUpdatesDuplicated += max(0, w.ServerCount-w.AckedLogged)
		}
	}
	e := int64(passes)
	for row, v := range perRow {
		n := int64(v)
		if n != e && len(a.Off) < maxOff {
			a.Off = append(a.Off, RowCount{row, n})
		}
		a.ExamplesAudited += n
		a.ExamplesRepeated += max(0, n-e)
		if n < e {
			a.ExamplesSkipped += e - n
			a.RowsSkipped++
		}
	}
	return a
}

// MaxStall returns the longest interval in which no acknowledgement was
// seen by any worker, given each worker's acknowledgement times in Unix
// nanoseconds, and the time at which that interval began; zero with fewer
// than two acknowledgements.
func MaxStall(timelines ...[]int64) (gap time.Duration, began int64) {
	var all []int64
	for _, t := range timelines {
		all = append(all, t...)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if d := time.Duration(all[i] - all[i-1]); d > gap {
			gap, began = d, all[i-1]
		}
	}
	return gap, began
}

// fill sets the accounting fields of r from the workers' audits (their
// Rank, AckedLogged and Finished set), their acknowledgement timelines and
// the audit tables, for a run whose training started at started.
func (r *Report) fill(audits []WorkerAudit, timelines [][]int64, perWorker, perRow []float32, passes int, started time.Time) {
	acc := Account(audits, perWorker, perRow, passes)
	r.Audit = audits
	r.AckedUpdatesLost = &acc.AckedUpdatesLost
	r.AckedUpdatesDuplicated = &acc.AckedUpdatesDuplicated
	r.ExamplesRepeated = &acc.ExamplesRepeated
	r.ExamplesSkipped = &acc.ExamplesSkipped
	r.ExamplesAudited = &acc.ExamplesAudited
	r.RowsSkipped = &acc.RowsSkipped
	r.RowsOff = acc.Off
	n := 0
	for _, t := range timelines {
		n += len(t)
	}
	if n >= 2 {
		gap, began := MaxStall(timelines...)
		secs, at := gap.Seconds(), time.Unix(0, began).Sub(started).Seconds()
		r.MaxStallSeconds, r.MaxStallAtSeconds = &secs, &at
	} else {
		r.note("max_stall_seconds: fewer than two acknowledged pushes were logged")
	}
	allFinished := len(audits) > 0 && !slices.ContainsFunc(audits, func(w WorkerAudit) bool { return !w.Finished })
	if allFinished {
		r.AckedExampleUpdatesLost = &acc.ExamplesSkipped
	}
	switch {
	case acc.ExamplesSkipped > 0 && allFinished:
		r.note("%d example trainings are missing (%d rows trained fewer than %d times) though every worker finished: their acknowledged increments of the trained table were lost", acc.ExamplesSkipped, acc.RowsSkipped, passes)
	case acc.ExamplesSkipped > 0:
		r.note("%d example trainings were skipped (%d rows trained fewer than %d times): a worker stopped and its partitions were not all trained by the others (increments lost on the servers would add to this)", acc.ExamplesSkipped, acc.RowsSkipped, passes)
	}
	if acc.ExamplesRepeated > 0 {
		r.note("%d example trainings were repeated beyond %d passes (a partition taken over from its last recorded offset repeats what its worker trained after that)", acc.ExamplesRepeated, passes)
	}
}

// Timeline records the acknowledgements of workers that run in this
// process (`terrace train --audit` without --processes): it stands in for
// their audit logs. It is safe for concurrent use.
type Timeline struct {
	mu    sync.Mutex
	times map[int][]int64
	acked map[int]int64
}

// Record is an onAck of StartAudit.
func (t *Timeline) Record(rank int, acked int64, at time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.times == nil {
		t.times, t.acked = map[int][]int64{}, map[int]int64{}
	}
	t.times[rank] = append(t.times[rank], at.UnixNano())
	t.acked[rank] = acked
	return nil
}

// Account reads the audit tables through c once the workers are done and
// returns a report with the accounting fields set; finished says which
// ranks trained to the end.
func (t *Timeline) Account(ctx context.Context, c *ps.Client, workers int, a Audit, finished map[int]bool) (*Report, error) {
	perWorker, perRow, err := ReadAudit(ctx, c, workers, a.Rows)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &Report{Faults: []Fault{}}
	var audits []WorkerAudit
	var timelines [][]int64
	started := time.Time{}
	for rank := range workers {
		audits = append(audits, WorkerAudit{Rank: rank, AckedLogged: t.acked[rank], Finished: finished[rank], LogComplete: finished[rank]})
		timelines = append(timelines, t.times[rank])
		if ts := t.times[rank]; len(ts) > 0 && (started.IsZero() || time.Unix(0, ts[0]).Before(started)) {
			started = time.Unix(0, ts[0])
		}
	}
	r.fill(audits, timelines, perWorker, perRow, a.Passes, started)
	return r, nil
}
