package api

import "context"

// RouteLoss is a BackupPS's count of the acknowledged updates lost at a
// fallback (docs/design/tiers.md, "Bulk revocation").
const RouteLoss = "POST /v1/servers/loss" // LossReport

// LossReport is what the loss ledger of BackupPS From counted at the
// fallback of Epoch, once the grace for re-sends had passed: Allowed are
// the pushes an ActivePS acknowledged (or was about to) in rounds that
// never became durable on From, in the slots From heads after the
// fallback; Lost are those whose clients did not re-send them.
type LossReport struct {
	From    string     `json:"from"`
	Epoch   uint64     `json:"epoch"`
	Allowed []LostPush `json:"allowed"`
	Lost    []LostPush `json:"lost"`
}

// LostPush is one push: its client, sequence number and table, and the
// rank of the worker that pushed it (-1 if the client was not a worker).
type LostPush struct {
	Client uint64 `json:"client"`
	Seq    uint64 `json:"seq"`
	Table  uint32 `json:"table"`
	Worker int    `json:"worker"`
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
	// Reports counts the ledgers that reported.
	Reports int `json:"reports"`
}

// ReportLoss sends a BackupPS's loss count to the coordinator.
func (c *Client) ReportLoss(ctx context.Context, r LossReport) error {
	return c.do(ctx, RouteLoss, "", r, nil)
}
