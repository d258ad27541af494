package replay

import (
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/jobsim"
	"github.com/terrace-ml/terrace/internal/market/policy"
)

// PolicyConfig is what the policies of a replay are built with, for a
// replay on real processes (internal/harness/realreplay) to build the
// same policies, but for BidBrain's elastic design: on processes it keeps
// the reliable tier (docs/design/market.md, "BidBrain without a reliable
// tier").
func (c Config) PolicyConfig() policy.Config { return c.tieredConfig() }

// Source is what a run from start replays (the prices, the preemption
// traces placed for start), for a replay on real processes.
func (c Config) Source(start time.Time) *history.Source { return c.source(start) }

// FreeShare is the share of a bill's compute that was not charged.
func FreeShare(b market.Bill, cal jobsim.Calibration) float64 { return freeShare(b, cal) }
