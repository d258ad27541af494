package billing

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

// Model is a market model. Its charges are pure functions of a machine's
// lifetime and the price path, so that a bill can be recomputed at any
// time and checked by hand.
type Model interface {
	Name() string
	// Notice is the lead time between an eviction notice and the end.
	Notice() time.Duration
	// Period is the billing granularity a policy plans over.
	Period() time.Duration
	// BidEvicts says whether machines are evicted by the price rising
	// above their bids (else by an availability trace).
	BidEvicts() bool
	// MaxPrice is the price above which a transient machine placed with
	// bid (zero: none given) in a market of that on-demand price is
	// evicted, and cannot be had (+Inf: never).
	MaxPrice(bid, onDemand float64) float64
	// Charge is what a machine of market series s (nil for a reliable
	// machine, billed at onDemand) costs from start to end, ended by by.
	Charge(s *trace.Series, onDemand float64, start, end time.Time, by market.EndedBy) float64
	// Free is the part of a transient machine's life from start to end,
	// ended by by, that is not charged.
	Free(start, end time.Time, by market.EndedBy) time.Duration
	// Terms are the same rules in the form a policy plans with.
	Terms() Terms
}

// Terms are the charging rules of transient machines as a policy plans
// with them.
type Terms struct {
	// Hourly: charged per started hour from the request, each hour at the
	// price at its start; a release is charged to the end of its hour.
	// Otherwise per second at the price in force.
	Hourly bool
	// FreeEvicted: an hour that ends in an eviction is not charged.
	FreeEvicted bool
	// FreeFirstHour: a machine evicted within its first hour is not
	// charged at all.
	FreeFirstHour bool
}

// Bid2015 is EC2's spot market as it was in 2015 (Proteus, EuroSys '17;
// the EC2 Spot documentation of the time): a machine is evicted with two
// minutes' notice when the price rises above its bid; each instance-hour
// is charged at the spot price in force when it starts; the partial hour
// is free when AWS evicts and charged in full when the user releases.
// On-demand machines are charged per started hour.
type Bid2015 struct{}

func (Bid2015) Name() string                    { return "bid2015" }
func (Bid2015) Notice() time.Duration           { return 2 * time.Minute }
func (Bid2015) Period() time.Duration           { return time.Hour }
func (Bid2015) BidEvicts() bool                 { return true }
func (Bid2015) Terms() Terms                    { return Terms{Hourly: true, FreeEvicted: true} }
func (Bid2015) MaxPrice(bid, _ float64) float64 { return bid }

func (Bid2015) Charge(s *trace.Series, onDemand float64, start, end time.Time, by market.EndedBy) float64 {
	d := end.Sub(start)
	if d <= 0 {
		return 0
	}
	started := int(math.Ceil(d.Hours()))
	if s == nil {
		return float64(started) * onDemand
	}
	hours := started
	if by == market.ByProvider {
		hours = int(d / time.Hour) // the interrupted partial hour is free
	}
	var sum float64
	for j := 0; j < hours; j++ {
		p, _ := s.At(start.Add(time.Duration(j) * time.Hour))
		sum += p
	}
	return sum
}

func (Bid2015) Free(start, end time.Time, by market.EndedBy) time.Duration {
	if by != market.ByProvider || !end.After(start) {
		return 0
	}
	return end.Sub(start) % time.Hour
}

// PerSecond is today's spot market (EC2 since 2017, Compute Engine): a
// machine is evicted when capacity goes (the availability trace says so),
// with the provider's notice; spot and on-demand machines are charged per
// second at the price in force, with a 60 s minimum. FreeFirstHour is
// EC2's rule that a Linux spot instance interrupted by EC2 within its
// first hour is not charged ("Billing for interrupted Spot Instances").
// OnDemandCap is EC2's default maximum price, the on-demand price ("If
// you don't specify a maximum price, the default is the On-Demand
// price"): a spot price above it interrupts the instance. Today's EC2
// prices stay below it; replayed 2015 prices do not.
type PerSecond struct {
	Provider      string
	Lead          time.Duration
	FreeFirstHour bool
	OnDemandCap   bool
}

// AWS and GCP are the per-second markets of the two clouds: AWS warns
// 120 s ahead, GCP 30 s.
var (
	AWS = PerSecond{Provider: "aws", Lead: 2 * time.Minute, FreeFirstHour: true, OnDemandCap: true}
	GCP = PerSecond{Provider: "gcp", Lead: 30 * time.Second}
)

func (p PerSecond) Name() string          { return "persecond" }
func (p PerSecond) Notice() time.Duration { return p.Lead }
func (PerSecond) Period() time.Duration   { return time.Hour }
func (PerSecond) BidEvicts() bool         { return false }
func (p PerSecond) Terms() Terms          { return Terms{FreeFirstHour: p.FreeFirstHour} }

func (p PerSecond) MaxPrice(bid, onDemand float64) float64 {
	switch {
	case bid > 0:
		return bid
	case p.OnDemandCap:
		return onDemand
	}
	return math.Inf(1)
}

func (p PerSecond) Free(start, end time.Time, by market.EndedBy) time.Duration {
	if d := end.Sub(start); p.FreeFirstHour && by == market.ByProvider && d > 0 && d < time.Hour {
		return d
	}
	return 0
}

const minimumBilled = 60 * time.Second

func (p PerSecond) Charge(s *trace.Series, onDemand float64, start, end time.Time, by market.EndedBy) float64 {
	d := end.Sub(start)
	if d <= 0 {
		return 0
	}
	if s == nil {
		return max(d, minimumBilled).Hours() * onDemand
	}
	if p.FreeFirstHour && by == market.ByProvider && d < time.Hour {
		return 0
	}
	if d < minimumBilled {
		price, _ := s.At(start)
		return minimumBilled.Hours() * price
	}
	return integrate(s, start, end)
}

// integrate is the dollar-hours of s's price over [start, end).
func integrate(s *trace.Series, start, end time.Time) float64 {
	i := sort.Search(len(s.Points), func(i int) bool { return s.Points[i].At.After(start) })
	at, price := start, 0.0
	if i > 0 {
		price = s.Points[i-1].Price
	}
	var sum float64
	for ; i < len(s.Points) && s.Points[i].At.Before(end); i++ {
		sum += s.Points[i].At.Sub(at).Hours() * price
		at, price = s.Points[i].At, s.Points[i].Price
	}
	return sum + end.Sub(at).Hours()*price
}

// ByName returns the model named on the command line.
func ByName(name, provider string) (Model, error) {
	switch name {
	case "bid2015":
		return Bid2015{}, nil
	case "persecond":
		switch provider {
		case "aws", "":
			return AWS, nil
		case "gcp":
			return GCP, nil
		}
		return nil, fmt.Errorf("--provider %q: want aws or gcp", provider)
	}
	return nil, fmt.Errorf("--market %q: want bid2015 or persecond", name)
}
