package replay

import (
	"context"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/jobsim"
	"github.com/terrace-ml/terrace/internal/market/policy"
	"github.com/terrace-ml/terrace/internal/market/rm"
)

// PolicyConfig is what the policies of a replay are built with, for a
// replay on real processes (internal/harness/realreplay) to build the
// same policies.
func (c Config) PolicyConfig() policy.Config { return c.policyConfig() }

// ChooseDesign asks pol, before its job starts, how the job survives
// evictions, from the trace's past at the start (past) and the job's
// work: "elastic" when a designer (BidBrain) drops the reliable tier,
// "tiers" when it keeps it, "" for a policy that chooses nothing.
func ChooseDesign(ctx context.Context, pol rm.Policy, past func(context.Context) (history.View, error), total float64) (string, error) {
	d, ok := pol.(designer)
	if !ok {
		return "", nil
	}
	v, err := past(ctx)
	if err != nil {
		return "", err
	}
	if d.Elastic(rm.State{View: v, Job: rm.JobStatus{Total: total}}) {
		return policy.DesignElastic, nil
	}
	return policy.DesignTiers, nil
}

// Source is what a run from start replays (the prices, the preemption
// traces placed for start), for a replay on real processes.
func (c Config) Source(start time.Time) *history.Source { return c.source(start) }

// FreeShare is the share of a bill's compute that was not charged.
func FreeShare(b market.Bill, cal jobsim.Calibration) float64 { return freeShare(b, cal) }
