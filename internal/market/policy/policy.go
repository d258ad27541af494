package policy

import (
	"fmt"
	"math"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/billing"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/rm"
)

// Config is what every policy knows of the job and the market model.
type Config struct {
	// Reference is the job's instance type; Machines its reference
	// footprint; Reliable the reliable tier; Max the job's parallelism.
	Reference string
	Machines  int
	Reliable  int
	Max       int
	// Rate is a worker's updates per hour on a type (an error: unknown).
	Rate func(typ string) (float64, error)
	// Throughput is the job's updates per hour with that many reliable
	// and transient machines working (counts may be fractional), at the
	// best stage: the planner's answer.
	Throughput func(reliable, transient, reliableRate, transientRate float64) float64
	// Elastic is the job's updates per hour without tiers, every machine
	// a server and a worker; nil: BidBrain keeps the reliable tier.
	Elastic func(machines, rate float64) float64
	// Design is BidBrain's design: DesignAuto (or "") chooses by the
	// objective, DesignTiers keeps the reliable tier, DesignElastic
	// drops it (with Elastic set).
	Design    string
	Estimator *history.Estimator
	// BidEvicts, Period, Terms and Notice describe the market model:
	// whether bids evict, the billing period (the planning horizon), how
	// transient machines are charged, and the notice before an eviction.
	BidEvicts bool
	Period    time.Duration
	Terms     billing.Terms
	Notice    time.Duration
	// Bid is the fixed bid of the checkpoint and tiers policies (zero:
	// the on-demand price, the usual practice).
	Bid float64
	// Setup is how long a new machine is paid before it works (boot,
	// join); Drain the handoff away from a leaving machine, which is also
	// how long before its billing hour ends a release is made;
	// SwitchPause what a stage switch costs the whole job; Checkpoint how
	// long a checkpoint takes.
	Setup, Drain, SwitchPause, Checkpoint time.Duration
}

// BidBrain's designs (Config.Design).
const (
	DesignAuto    = "auto"
	DesignTiers   = "tiers"
	DesignElastic = "elastic"
)

// Designs are the values Config.Design takes.
var Designs = []string{DesignAuto, DesignTiers, DesignElastic}

// New returns the policy called name.
func New(name string, c Config) (rm.Policy, error) {
	switch name {
	case "ondemand":
		return &OnDemand{c: c}, nil
	case "checkpoint":
		return &Checkpoint{c: c}, nil
	case "tiers":
		return &Tiers{c: c}, nil
	case "bidbrain":
		return &BidBrain{c: c}, nil
	}
	return nil, fmt.Errorf("--policy %q: want ondemand, checkpoint, tiers, bidbrain or all", name)
}

// Names are the policies in the order the replay reports them.
var Names = []string{"ondemand", "checkpoint", "tiers", "bidbrain"}

// live counts the machines held per class that are not on notice.
func live(held []rm.Holding, class market.Class) int {
	n := 0
	for _, h := range held {
		if h.Class == class && !h.Noticed {
			n++
		}
	}
	return n
}

// cheapestZone returns the market of type typ with the lowest current
// price that a machine can be had in now (bid at most maxBid when bids
// evict; capacity when a trace says so).
func cheapestZone(v history.View, typ string, maxBid float64, bids bool) (*history.Market, bool) {
	var best *history.Market
	bestPrice := math.Inf(1)
	for i := range v.Markets {
		m := &v.Markets[i]
		p, ok := m.Price()
		if m.Market.Type != typ || !ok || (bids && p > maxBid) || m.Available() == 0 {
			continue
		}
		if p < bestPrice {
			best, bestPrice = m, p
		}
	}
	return best, best != nil
}

// reliableMarket returns a market of type typ (on-demand prices do not
// differ between zones).
func reliableMarket(v history.View, typ string) (*history.Market, bool) {
	for i := range v.Markets {
		if v.Markets[i].Market.Type == typ {
			return &v.Markets[i], true
		}
	}
	return nil, false
}

// topUp requests the machines missing to reach want in class, in market m.
func topUp(held []rm.Holding, class market.Class, want int, m *history.Market, bid float64) []market.Request {
	if n := want - live(held, class); n > 0 && m != nil {
		return []market.Request{{Market: m.Market, Class: class, Count: n, Bid: bid}}
	}
	return nil
}

func done(s rm.State) bool { return s.Job.Total > 0 && s.Job.Done >= s.Job.Total }
