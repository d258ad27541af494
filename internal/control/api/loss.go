package api

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/terrace-ml/terrace/keyspace"
)

// RouteLoss is a BackupPS's count of the acknowledged updates lost at a
// fallback (docs/design/tiers.md, "Bulk revocation").
const RouteLoss = "POST /v1/servers/loss" // LossReport

// MaxLossBytes is the largest loss report the coordinator takes. A
// report names its pushes as runs of sequence numbers, a few dozen
// bytes per client and table when a client's pushes at risk are
// consecutive (those of the last sync interval), as they are; this
// leaves room for a million scattered ones.
const MaxLossBytes = 32 << 20

// LossReport is what the loss ledger of BackupPS From counted at the
// fallback of Epoch, once the grace for re-sends had passed: Allowed are
// the pushes an ActivePS acknowledged (or was about to) in rounds that
// never became durable on From, in the slots From heads after the
// fallback; Lost are those whose clients did not re-send them.
type LossReport struct {
	From    string     `json:"from"`
	Epoch   uint64     `json:"epoch"`
	Allowed []PushRuns `json:"allowed"`
	Lost    []PushRuns `json:"lost"`
}

// PushRuns are one client's pushes to one table, with the rank of the
// worker that pushed them (-1 if the client was not a worker), as runs
// of sequence numbers: Seqs holds [lo, hi) pairs, sorted and disjoint.
// A list of single pushes made a fallback's report of 10,000 pushes (one
// sync interval of four workers on a fast host) 1.2 MB, over the
// coordinator's limit, and the count never arrived.
type PushRuns struct {
	Client uint64           `json:"client"`
	Table  uint32           `json:"table"`
	Worker int              `json:"worker"`
	Seqs   keyspace.SlotSet `json:"seqs"`
}

// CountPushes is how many pushes rs names.
func CountPushes(rs []PushRuns) int64 {
	var n int64
	for _, r := range rs {
		n += int64(r.Seqs.Size())
	}
	return n
}

// Check refuses a report whose runs are not sorted, disjoint, non-empty
// [lo, hi) pairs.
func (r LossReport) Check() error {
	for _, l := range [][]PushRuns{r.Allowed, r.Lost} {
		for _, p := range l {
			if !p.Seqs.Valid() {
				return fmt.Errorf("%w: loss report from %q: client %d table %d: seqs %v are not sorted, disjoint [lo, hi) runs", ErrBadRequest, r.From, p.Client, p.Table, p.Seqs)
			}
		}
	}
	return nil
}

// LostPush is one push: its client, sequence number and table, and the
// rank of the worker that pushed it (-1 if the client was not a worker).
type LostPush struct {
	Client uint64
	Seq    uint64
	Table  uint32
	Worker int
}

// Runs gathers pushes into runs, one per client, table and worker, in
// that order.
func Runs(ps []LostPush) []PushRuns {
	type key struct {
		client uint64
		table  uint32
		worker int
	}
	at := map[key]int{}
	var out []PushRuns
	for _, p := range ps {
		k := key{p.Client, p.Table, p.Worker}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, PushRuns{Client: p.Client, Table: p.Table, Worker: p.Worker})
		}
		out[i].Seqs.Add(p.Seq)
	}
	slices.SortFunc(out, ComparePushRuns)
	return out
}

// ComparePushRuns orders runs by client, table and worker.
func ComparePushRuns(a, b PushRuns) int {
	return cmp.Or(cmp.Compare(a.Client, b.Client), cmp.Compare(a.Table, b.Table), cmp.Compare(a.Worker, b.Worker))
}

// Loss is what the ledgers counted at every fallback so far.
type Loss struct {
	// UpdatesLost counts the distinct acknowledged pushes lost;
	// UpdatesLostBound those allowed in the rounds at risk (by the gate, at
	// most one sync interval's worth per fallback).
	UpdatesLost      int64 `json:"updates_lost"`
	UpdatesLostBound int64 `json:"updates_lost_bound"`
	// ByTable and BoundByTable split them by table name.
	ByTable      map[string]int64 `json:"by_table,omitempty"`
	BoundByTable map[string]int64 `json:"bound_by_table,omitempty"`
	// ByWorker splits UpdatesLost by table name, then by worker rank.
	ByWorker map[string]map[int]int64 `json:"by_worker,omitempty"`
	// Reports counts the ledgers that reported; Unreported the ledgers a
	// fallback made heads that died or left before their report, whose
	// pushes lost are missing from UpdatesLost (then a lower bound).
	Reports    int `json:"reports"`
	Unreported int `json:"unreported,omitempty"`
}

// ReportLoss sends a BackupPS's loss count to the coordinator.
func (c *Client) ReportLoss(ctx context.Context, r LossReport) error {
	return c.do(ctx, RouteLoss, "", r, nil)
}
