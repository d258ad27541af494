package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/billing"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/jobsim"
	"github.com/terrace-ml/terrace/internal/market/policy"
	"github.com/terrace-ml/terrace/internal/market/rm"
	"github.com/terrace-ml/terrace/internal/market/trace"
	"github.com/terrace-ml/terrace/internal/market/traceprov"
)

// ErrTraceEnded: the trace ended before the job did.
var ErrTraceEnded = errors.New("the trace ends before the job finishes")

// Config is one replay.
type Config struct {
	Prices *trace.Prices
	// Avail are the preemption traces of a per-second market, assigned
	// to the markets in turn (market i gets Avail[i mod len]).
	Avail []*trace.Availability
	// At is where a run's start sits in each of Avail: At[i] of Avail[i]
	// is already past then, as the past its policy sees. Nil places each
	// trace at its Lead, as a single run does; a sweep moves it with the
	// start (Spread).
	At    []time.Duration
	Model billing.Model
	Cal   jobsim.Calibration
	// Updates is the job's work.
	Updates float64
	// Bid is the checkpoint and tiers policies' fixed bid (0: on-demand).
	Bid float64
	// Design is BidBrain's (policy.Config.Design).
	Design string
	// Progress receives a plain line per finished run, and one at most
	// every Every of wall time within a long run.
	Progress io.Writer
	Every    time.Duration
	// Advance, when set, hears how much of the sweep is done, in runs
	// (fractions of the run in progress included) of total, at most
	// every advanceEvery of wall time (for a progress bar).
	Advance func(done float64, total int)
	// fraction is Sweep's: how far the run in progress is.
	fraction func(done float64)
	// Sample is the trace time between timeline samples (for the plot);
	// zero keeps no timeline.
	Sample time.Duration
	// Estimator is shared between runs of one trace.
	Estimator *history.Estimator
}

// Result is what one policy's run from one start cost.
type Result struct {
	Policy          string    `json:"-"`
	Start           time.Time `json:"-"`
	Dollars         float64   `json:"dollars"`
	OnDemandDollars float64   `json:"ondemand_dollars"`
	Hours           float64   `json:"hours"`
	Evictions       int       `json:"evictions"`
	Acquisitions    int       `json:"acquisitions"`
	StageSwitches   int       `json:"stage_switches"`
	UpdatesLost     float64   `json:"updates_lost"`
	// Design is how the job survived evictions: "tiers" (a reliable
	// tier), "elastic" (BidBrain without one: drains, and a checkpoint
	// for the case that no machine is left), "checkpoint" (restarts from
	// a checkpoint) or "ondemand" (never evicted).
	Design string `json:"design"`
	// FreeShare is the share of the compute held (machine-hours weighted
	// by each type's worker rate) that was not charged.
	FreeShare float64 `json:"free_compute_share"`
	// Unfinished marks a run that the trace ended before the job did
	// (kept in a sweep of several starts; a single run fails instead): its
	// figures run to the trace's end, and DoneShare is the share of the
	// work done by then.
	Unfinished bool     `json:"unfinished,omitempty"`
	DoneShare  float64  `json:"done_share,omitempty"`
	Timeline   []Sample `json:"-"`
}

// Sample is the state of one run at one time.
type Sample struct {
	At                  time.Time
	Reliable, Transient int
	MeanBid, Price      float64
	Stage               int
	Dollars             float64
}

// mode returns how a policy's job survives losses, and the machines a
// flat job needs.
func mode(name string, c jobsim.Calibration) (jobsim.Mode, int) {
	switch name {
	case "checkpoint":
		return jobsim.Flat, c.Machines
	case "ondemand":
		return jobsim.Flat, 1
	}
	return jobsim.Tiered, 0
}

func (c Config) policyConfig() policy.Config {
	flow := jobsim.FlowOf(c.Cal)
	return policy.Config{
		Reference: c.Cal.ReferenceType, Machines: c.Cal.Machines, Reliable: c.Cal.ReliableMachines, Max: c.Cal.MaxMachines,
		Rate: c.Cal.Rate, Throughput: flow.BestRate, Estimator: c.Estimator,
		Elastic: func(n, rate float64) float64 { return flow.Stage(0, jobsim.Mix{Transient: n, TransientRate: rate}) }, Design: c.Design,
		BidEvicts: c.Model.BidEvicts(), Period: c.Model.Period(), Terms: c.Model.Terms(), Notice: c.Model.Notice(), Bid: c.Bid,
		Setup: c.Cal.Setup(), Drain: c.Cal.Drain(), SwitchPause: c.Cal.SwitchPause(), Checkpoint: c.Cal.Transfer(c.Cal.Machines),
	}
}

// Lead is how much of a preemption trace lies before a run's start, as
// the past its policy sees: two weeks, or half a shorter trace.
func Lead(a *trace.Availability) time.Duration { return min(14*24*time.Hour, a.End/2) }

// at is how much of preemption trace i is past at a run's start: At[i],
// or the trace's Lead.
func (c Config) at(i int) time.Duration {
	if c.At == nil {
		return Lead(c.Avail[i])
	}
	return c.At[i]
}

// source is what the provider of a run from start replays: the prices,
// and each preemption trace placed so that at of it is past at start.
func (c Config) source(start time.Time) *history.Source {
	src := &history.Source{Prices: c.Prices}
	if len(c.Avail) == 0 {
		return src
	}
	src.Avail = map[market.Market]*history.Timeline{}
	for i, s := range c.Prices.Series {
		k := i % len(c.Avail)
		src.Avail[s.Market] = history.Place(c.Avail[k], start.Add(-c.at(k)))
	}
	return src
}

// SpreadMargin is how many times the on-demand reference's hours a
// preemption trace must still hold after a start's position in it for a
// sweep to move the position: a spot policy runs longer than the
// reference when it is evicted often (checkpoint-restart about 1.5 times
// on SkyPilot's 1-node AWS traces, twelfth session), and a run past the
// trace's end is unfinished.
const SpreadMargin = 2

// Spread is where the i-th of n starts of a sweep sits in each of Avail,
// for a job expected to take d (SpreadMargin times the on-demand
// reference's hours): the same share i/n of the positions that leave the
// policy its Lead of past and d of trace ahead, [Lead, End−d], as the
// start has of the sweep's segment. The first start (and a single run)
// sits at Lead, as before. A trace that cannot hold d after its Lead
// (or d unknown, zero) keeps Lead for every start, and is named in kept.
func (c Config) Spread(i, n int, d time.Duration) (at []time.Duration, kept []int) {
	at = make([]time.Duration, len(c.Avail))
	for k, a := range c.Avail {
		lo, hi := Lead(a), a.End-d
		at[k] = lo
		if d <= 0 || hi < lo {
			kept = append(kept, k)
			continue
		}
		at[k] = lo + time.Duration(int64(hi-lo)/int64(n)*int64(i))
	}
	return at, kept
}

// Horizon is where a run from start runs out of trace, and what ends
// there: the price trace's end, or, for a policy that holds spot
// machines, an earlier end of a preemption trace in use, which says
// nothing of what followed it (on-demand machines are in none).
func (c Config) Horizon(start time.Time, spot bool) (time.Time, string) {
	_, end := c.Prices.Span()
	what := "the price trace " + c.Prices.Source
	for i := 0; spot && i < min(len(c.Avail), len(c.Prices.Series)); i++ {
		a := c.Avail[i]
		if e := start.Add(a.End - c.at(i)); e.Before(end) {
			end = e
			what = fmt.Sprintf("the preemption trace %s (%v long, %v of it before the start as the past)", a.Source, a.End.Round(time.Minute), c.at(i).Round(time.Minute))
		}
	}
	return end, what
}

// run is one policy's run from start.
type run struct {
	ctx   context.Context
	cfg   Config
	name  string
	start time.Time
	job   *jobsim.Job
	prov  *traceprov.Provider
	mgr   *rm.Manager
	err   error
	res   Result
}

// Run replays policy name from start until the job is done.
func Run(ctx context.Context, cfg Config, name string, start time.Time) (Result, error) {
	pol, err := policy.New(name, cfg.policyConfig())
	if err != nil {
		return Result{}, err
	}
	return runWith(ctx, cfg, pol, start)
}

// designer is a policy that chooses, before the job starts, whether it
// runs without the reliable tier (BidBrain).
type designer interface {
	Elastic(s rm.State) bool
}

func runWith(ctx context.Context, cfg Config, pol rm.Policy, start time.Time) (Result, error) {
	name := pol.Name()
	md, need := mode(name, cfg.Cal)
	r := &run{ctx: ctx, cfg: cfg, name: name, start: start}
	r.prov = traceprov.New(traceprov.Config{Source: cfg.source(start), Model: cfg.Model, Boot: cfg.Cal.Boot(), Start: start, Handler: r.handle})
	r.res = Result{Policy: name, Start: start, Design: policy.DesignTiers}
	if md == jobsim.Flat {
		r.res.Design = name
	} else {
		d, err := ChooseDesign(ctx, pol, r.prov.Past, cfg.Updates)
		if err != nil {
			return r.res, err
		}
		if d == policy.DesignElastic {
			md, r.res.Design = jobsim.Elastic, d
		}
	}
	r.job = jobsim.New(cfg.Cal, md, need, cfg.Updates, start)
	r.mgr = rm.NewManager(r.prov, pol, r.job)
	if err := r.mgr.Start(ctx); err != nil {
		return r.res, err
	}
	if err := r.loop(ctx); err != nil {
		return r.res, fmt.Errorf("%s from %s: %w", name, start.Format(time.RFC3339), err)
	}
	return r.res, nil
}

func (r *run) handle(ev market.Event) {
	if r.err != nil {
		return
	}
	if err := r.job.Handle(ev); err != nil {
		r.err = err
		return
	}
	r.err = r.mgr.Handle(r.ctx, ev)
}

// advanceEvery is how often a run tells Config.Advance how far it is.
const advanceEvery = 200 * time.Millisecond

func (r *run) loop(ctx context.Context) error {
	end, what := r.cfg.Horizon(r.start, r.name != "ondemand")
	nextSample, lastLine, lastFrac := r.start, time.Now(), time.Now()
	shown := 0.0 // the fraction told last: work lost to an eviction does not take the bar back
	for r.job.Finished().IsZero() {
		t := Earliest(r.prov.Next(), r.job.Next(), r.mgr.Wake())
		if r.cfg.Sample > 0 && (t.IsZero() || nextSample.Before(t)) {
			t = nextSample
		}
		if t.IsZero() || t.After(end) {
			if err := r.cut(ctx, end); err != nil {
				return err
			}
			return fmt.Errorf("%w: %s ends at %s, %.0f%% done", ErrTraceEnded, what, end.Format(time.RFC3339), 100*r.res.DoneShare)
		}
		r.job.AdvanceTo(t)
		if !r.job.Finished().IsZero() {
			break
		}
		r.prov.AdvanceTo(t)
		if err := r.mgr.Tick(ctx, t); err != nil {
			return err
		}
		if r.err != nil {
			return r.err
		}
		if r.cfg.Sample > 0 && !t.Before(nextSample) {
			r.sample(ctx, t)
			nextSample = t.Add(r.cfg.Sample)
		}
		if r.cfg.fraction != nil && time.Since(lastFrac) > advanceEvery {
			lastFrac = time.Now()
			if st := r.job.Status(); st.Total > 0 && st.Done/st.Total > shown {
				shown = st.Done / st.Total
				r.cfg.fraction(shown)
			}
		}
		if r.cfg.Progress != nil && r.cfg.Every > 0 && time.Since(lastLine) > r.cfg.Every {
			lastLine = time.Now()
			st := r.job.Status()
			fmt.Fprintf(r.cfg.Progress, "replay: %s from %s: %.0f%% of the work at %s\n", r.name, r.start.Format(time.RFC3339), 100*st.Done/st.Total, t.Format(time.RFC3339))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return r.finish(ctx)
}

// cut fills the result of a run the trace ended at end, before the job
// finished: what the machines held cost and did until then.
func (r *run) cut(ctx context.Context, end time.Time) error {
	r.job.AdvanceTo(end)
	r.prov.AdvanceTo(end)
	return r.settle(ctx, end, r.mgr.Counts(), r.job.Status().Done/r.cfg.Updates)
}

// settle fills the result with the bill as of at (the job's end, or the
// trace's) and the counts c; done is the share of the work done by then.
func (r *run) settle(ctx context.Context, at time.Time, c rm.Counts, done float64) error {
	bill, err := r.prov.Bill(ctx)
	if err != nil {
		return err
	}
	r.res.Dollars, r.res.Hours = bill.Dollars, at.Sub(r.start).Hours()
	r.res.Evictions, r.res.Acquisitions = c.Evictions, c.Acquisitions
	r.res.StageSwitches, r.res.UpdatesLost = len(r.job.Switches), r.job.Lost
	r.res.FreeShare, r.res.DoneShare, r.res.Unfinished = freeShare(bill, r.cfg.Cal), done, done < 1
	return nil
}

func (r *run) finish(ctx context.Context) error {
	fin := r.job.Finished()
	r.prov.AdvanceTo(fin)
	c := r.mgr.Counts()
	if err := r.windDown(ctx, fin); err != nil {
		return err
	}
	if err := r.settle(ctx, fin, c, 1); err != nil {
		return err
	}
	if r.cfg.Sample > 0 {
		r.sample(ctx, fin)
	}
	return nil
}

// windDown gives back the machines held once the job is done, each when
// that costs least (lastCall), in time order; a machine evicted before
// its turn ends by the provider's hand, and so does one on notice.
func (r *run) windDown(ctx context.Context, fin time.Time) error {
	type release struct {
		at time.Time
		id market.MachineID
	}
	var rs []release
	for _, h := range r.mgr.Held() {
		if !h.Noticed {
			rs = append(rs, release{r.lastCall(h.Machine, fin), h.ID})
		}
	}
	sort.Slice(rs, func(i, j int) bool {
		return rs[i].at.Before(rs[j].at) || rs[i].at.Equal(rs[j].at) && rs[i].id < rs[j].id
	})
	for _, x := range rs {
		r.prov.AdvanceTo(x.at)
		if h, ok := r.holding(x.id); ok && !h.Noticed {
			if err := r.mgr.Release(ctx, x.id); err != nil {
				return err
			}
		}
	}
	last := fin
	for _, h := range r.mgr.Held() {
		if h.Deadline.After(last) {
			last = h.Deadline
		}
	}
	r.prov.AdvanceTo(last)
	return nil
}

func (r *run) holding(id market.MachineID) (rm.Holding, bool) {
	for _, h := range r.mgr.Held() {
		if h.ID == id {
			return h, true
		}
	}
	return rm.Holding{}, false
}

// lastCall is when a machine still held at the job's end fin is best
// given back: a transient machine billed by the hour just before its paid
// hour ends (its drain before), since an eviction until then makes that
// hour free and a release does not; one in EC2's free first hour just
// before that hour ends, for the same reason; any other machine at once.
func (r *run) lastCall(m market.Machine, fin time.Time) time.Time {
	if m.Class == market.Reliable {
		return fin
	}
	terms, h, drain := r.cfg.Model.Terms(), r.cfg.Model.Period(), r.cfg.Cal.Drain()
	age := fin.Sub(m.Requested)
	var at time.Time
	switch {
	case terms.Hourly:
		k := age / h
		if age%h != 0 {
			k++
		}
		at = m.Requested.Add(k*h - drain)
	case terms.FreeFirstHour:
		at = m.Requested.Add(time.Hour - drain)
	}
	if at.After(fin) {
		return at
	}
	return fin
}

// freeShare is the share of a bill's compute that was not charged.
func freeShare(b market.Bill, cal jobsim.Calibration) float64 {
	var held, free float64
	for _, u := range b.Usage {
		rate, err := cal.Rate(u.Market.Type)
		if err != nil {
			continue
		}
		held += rate * u.Held.Hours()
		free += rate * u.Free.Hours()
	}
	if held == 0 {
		return 0
	}
	return free / held
}

func (r *run) sample(ctx context.Context, t time.Time) {
	s := Sample{At: t, Stage: r.job.Status().Stage}
	var bids float64
	for _, h := range r.mgr.Held() {
		if h.Noticed {
			continue
		}
		if h.Class == market.Reliable {
			s.Reliable++
		} else {
			s.Transient++
			bids += h.Bid
		}
	}
	if s.Transient > 0 {
		s.MeanBid = bids / float64(s.Transient)
	}
	if b, err := r.prov.Bill(ctx); err == nil {
		s.Dollars = b.Dollars
	}
	v, _ := r.prov.Past(ctx)
	for _, m := range v.Markets {
		if p, ok := m.Price(); ok && m.Market.Type == r.cfg.Cal.ReferenceType && (s.Price == 0 || p < s.Price) {
			s.Price = p
		}
	}
	r.res.Timeline = append(r.res.Timeline, s)
}

// Earliest is the earliest of ts that is set (zero if none is): the next
// wake-up of a replay's loop among its sources'.
func Earliest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if !t.IsZero() && (out.IsZero() || t.Before(out)) {
			out = t
		}
	}
	return out
}
