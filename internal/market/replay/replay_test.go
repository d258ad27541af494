package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/billing"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/jobsim"
	"github.com/terrace-ml/terrace/internal/market/policy"
	"github.com/terrace-ml/terrace/internal/market/rm"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

var t0 = time.Date(2015, 3, 1, 0, 0, 0, 0, time.UTC)

// synthetic is a seeded market of three zones of c3.xlarge and one of
// r3.large over 40 days: prices that wander around a fifth of on-demand,
// changing every few minutes, with occasional short rises.
func synthetic(seed uint64) *trace.Prices {
	rng := rand.New(rand.NewPCG(seed, 1))
	p := &trace.Prices{Source: "synthetic"}
	for _, m := range []struct {
		zone, typ string
		od        float64
	}{{"z-a", "c3.xlarge", 0.21}, {"z-b", "c3.xlarge", 0.21}, {"z-c", "c3.xlarge", 0.21}, {"z-a", "r3.large", 0.175}} {
		s := &trace.Series{Market: market.Market{Zone: m.zone, Type: m.typ}, OnDemand: m.od}
		base := m.od / 5
		for at := t0; at.Before(t0.Add(40 * 24 * time.Hour)); at = at.Add(time.Duration(1+rng.IntN(20)) * time.Minute) {
			price := base * (0.8 + 0.4*rng.Float64())
			if rng.IntN(200) == 0 {
				price = m.od * (1 + rng.Float64())
			}
			s.Points = append(s.Points, trace.Point{At: at, Price: float64(int(price*1e4)) / 1e4})
		}
		p.Series = append(p.Series, s)
	}
	return p
}

func testConfig(p *trace.Prices) Config {
	cal := jobsim.DefaultCalibration()
	return Config{Prices: p, Model: billing.Bid2015{}, Cal: cal, Updates: 1e7, Estimator: history.NewEstimator(time.Hour)}
}

// recorder keeps every decision a policy made.
type recorder struct {
	rm.Policy
	log []string
}

// Elastic passes the replay's question to a policy that chooses its
// design (BidBrain), so that the job is built as the policy decides.
func (r *recorder) Elastic(s rm.State) bool {
	d, ok := r.Policy.(designer)
	return ok && d.Elastic(s)
}

func (r *recorder) Decide(s rm.State) rm.Plan {
	p := r.Policy.Decide(s)
	r.log = append(r.log, fmt.Sprintf("%s %+v %d %v %s", s.View.Now.Format(time.RFC3339Nano), p.Acquire, len(p.Release), p.Checkpoint, p.Wake.Format(time.RFC3339)))
	return p
}

func decisions(t *testing.T, p *trace.Prices, name string, start time.Time) []string {
	cfg := testConfig(p)
	pol, err := policy.New(name, cfg.policyConfig())
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Policy: pol}
	if _, err := runWith(context.Background(), cfg, rec, start); err != nil {
		t.Fatal(err)
	}
	return rec.log
}

// TestNoLookahead feeds every policy the same trace twice, the second
// time with a spike added after time T, and checks that every decision
// before T is the same (and that the spike does change later ones, so the
// test can tell).
func TestNoLookahead(t *testing.T) {
	start := t0.Add(20 * 24 * time.Hour)
	spike := start.Add(90 * time.Minute)
	plain := synthetic(7)
	spiked := synthetic(7)
	for _, s := range spiked.Series {
		if s.Market.Type != "c3.xlarge" {
			continue
		}
		var pts []trace.Point
		for _, pt := range s.Points {
			if !pt.At.Before(spike) && pt.At.Before(spike.Add(time.Hour)) {
				pt.Price = 9.99
			}
			pts = append(pts, pt)
		}
		s.Points = append(pts, trace.Point{At: spike, Price: 9.99})
		sortPoints(s.Points)
	}
	for _, name := range policy.Names {
		a, b := decisions(t, plain, name, start), decisions(t, spiked, name, start)
		before := 0
		for i := range a {
			if a[i][:len(time.RFC3339)] >= spike.Format(time.RFC3339) {
				break
			}
			if i >= len(b) || a[i] != b[i] {
				t.Fatalf("%s: decision %d before the spike differs:\n%s\n%s", name, i, a[i], b[i])
			}
			before++
		}
		if before == 0 {
			t.Errorf("%s: no decision before the spike", name)
		}
		if name != "ondemand" && reflect.DeepEqual(a, b) {
			t.Errorf("%s: the spike changed nothing: the test cannot tell", name)
		}
	}
}

func sortPoints(p []trace.Point) {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && p[j].At.Before(p[j-1].At); j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}

// TestSweep runs every policy from three starts and checks the report.
func TestSweep(t *testing.T) {
	p := synthetic(3)
	cfg := testConfig(p)
	cfg.Sample = 30 * time.Minute
	starts := []time.Time{t0.Add(15 * 24 * time.Hour), t0.Add(20 * 24 * time.Hour), t0.Add(25 * 24 * time.Hour)}
	var advanced []float64
	cfg.Advance = func(done float64, total int) {
		if total != len(starts)*len(policy.Names) {
			t.Errorf("advance: %v of %d runs", done, total)
		}
		advanced = append(advanced, done)
	}
	rep, err := Sweep(context.Background(), cfg, policy.Names, starts)
	if err != nil {
		t.Fatal(err)
	}
	// The progress bar's steps only grow, and end with every run done.
	if n := len(advanced); n < len(starts)*len(policy.Names) || !slices.IsSorted(advanced) || advanced[n-1] != float64(len(starts)*len(policy.Names)) {
		t.Errorf("advanced %v", advanced)
	}
	if len(rep.Runs) != 3 || rep.BidBrainVsOnDemandMedian == nil || rep.BidBrainVsCheckpointWorst == nil {
		t.Fatalf("report %+v", rep)
	}
	od := rep.Policies["ondemand"]
	// 32 reference machines for 1e7 updates: ceil(1e7/(32·50,400)) hours.
	if want := 7 * 32 * 0.21; math.Abs(od.Dollars-want) > 1e-9 || od.Evictions != 0 {
		t.Errorf("on-demand %+v, want $%v and no eviction", od, want)
	}
	for _, name := range policy.Names {
		r := rep.Policies[name]
		if r.Dollars <= 0 || r.Hours <= 0 || r.OnDemandDollars != od.Dollars {
			t.Errorf("%s: %+v", name, r)
		}
		if len(rep.Timelines[name]) == 0 {
			t.Errorf("%s: no timeline", name)
		}
	}
	if bb := rep.Policies["bidbrain"]; bb.Dollars >= od.Dollars {
		t.Errorf("bidbrain $%v, on-demand $%v", bb.Dollars, od.Dollars)
	}
}

// TestSweepKeepsUnfinishedStarts: in a sweep of several starts, a start
// too close to the trace's end for the job does not end the sweep (it
// did, after the earlier starts' minutes of work, on a trace whose
// prices stayed above the bid for days): its runs are kept as
// unfinished, with what they cost and did until the trace ended, and
// left out of the medians and ratios.
func TestSweepKeepsUnfinishedStarts(t *testing.T) {
	p := synthetic(3)
	cfg := testConfig(p)
	_, end := p.Span()
	starts := []time.Time{t0.Add(15 * 24 * time.Hour), end.Add(-2 * time.Hour)}
	var progress strings.Builder
	cfg.Progress = &progress
	rep, err := Sweep(context.Background(), cfg, []string{"ondemand", "checkpoint"}, starts)
	if err != nil {
		t.Fatal(err)
	}
	last := rep.Runs[1].Policies
	for _, name := range []string{"ondemand", "checkpoint"} {
		if r := last[name]; !r.Unfinished || !(r.DoneShare > 0 && r.DoneShare < 1) || r.Dollars <= 0 || math.Abs(r.Hours-2) > 0.01 {
			t.Errorf("%s from 2 h before the end: %+v, want unfinished, part done, two hours paid", name, r)
		}
		if r := rep.Runs[0].Policies[name]; r.Unfinished || r.DoneShare != 1 {
			t.Errorf("%s from day 15: %+v, want finished", name, r)
		}
		if rep.Unfinished[name] != 1 {
			t.Errorf("unfinished runs %v, want one of %s", rep.Unfinished, name)
		}
	}
	// The medians are the finished start's figures.
	if od := rep.Policies["ondemand"]; od.Unfinished || od.Dollars != rep.Runs[0].Policies["ondemand"].Dollars {
		t.Errorf("on-demand median %+v, want the first start's", od)
	}
	if !strings.Contains(progress.String(), "left out of the medians") {
		t.Errorf("progress does not say a run was left out:\n%s", progress.String())
	}
	var sum strings.Builder
	rep.Summary(&sum, []string{"ondemand", "checkpoint"})
	if !strings.Contains(sum.String(), "checkpoint: 1 of 2 starts ended with the trace") {
		t.Errorf("summary:\n%s", sum.String())
	}
	// One start alone still fails at once.
	if _, err := Sweep(context.Background(), cfg, []string{"ondemand"}, starts[1:]); !errors.Is(err, ErrTraceEnded) {
		t.Errorf("one start: %v, want ErrTraceEnded", err)
	}
}

// TestTraceEnds: a job that cannot finish before the trace ends fails
// with ErrTraceEnded.
func TestTraceEnds(t *testing.T) {
	p := synthetic(3)
	cfg := testConfig(p)
	cfg.Updates = 1e12
	if _, err := Run(context.Background(), cfg, "ondemand", t0.Add(39*24*time.Hour)); err == nil {
		t.Fatal("a job longer than the trace finished")
	}
}

// TestPreemptionTraceEnds: a run that outlasts its preemption trace
// ends there as a run the trace ended (it went on, on the trace's last
// count, as if the market had stayed so for good), naming the file.
func TestPreemptionTraceEnds(t *testing.T) {
	cfg := testConfig(synthetic(3))
	cfg.Model = billing.GCP
	cfg.Avail = []*trace.Availability{{Source: "short.txt", Offsets: []time.Duration{0, 3 * time.Hour}, Counts: []int{4, 3}, Size: 4, End: 8 * time.Hour}}
	start := t0.Add(15 * 24 * time.Hour)
	if end, _ := cfg.Horizon(start, true); !end.Equal(start.Add(4 * time.Hour)) {
		t.Errorf("horizon %v, want 4 h after the start (half of the 8 h trace is the past)", end)
	}
	_, err := Run(context.Background(), cfg, "checkpoint", start)
	if !errors.Is(err, ErrTraceEnded) || !strings.Contains(err.Error(), "short.txt") {
		t.Fatalf("got %v, want ErrTraceEnded naming short.txt", err)
	}
	// On-demand machines are in no preemption trace.
	if _, err := Run(context.Background(), cfg, "ondemand", start); err != nil {
		t.Errorf("on-demand: %v", err)
	}
	cfg.Avail[0].End = 80 * 24 * time.Hour
	if _, err := Run(context.Background(), cfg, "checkpoint", start); err != nil {
		t.Errorf("a trace longer than the job: %v", err)
	}
}

// rising is a market of one zone of c3.xlarge at 0.03 whose price rises
// to 0.20 (just below on-demand) for five minutes at twenty to every
// hour: a machine bought at 0.03 and bid below 0.20 is evicted within the
// hour it is bought in, wherever in the hour that is.
func rising() *trace.Prices {
	s := &trace.Series{Market: market.Market{Zone: "z-r", Type: "c3.xlarge"}, OnDemand: 0.21}
	for h := 0; h < 24*30; h++ {
		at := t0.Add(time.Duration(h) * time.Hour)
		s.Points = append(s.Points, trace.Point{At: at, Price: 0.03}, trace.Point{At: at.Add(40 * time.Minute), Price: 0.20}, trace.Point{At: at.Add(45 * time.Minute), Price: 0.03})
	}
	return &trace.Prices{Source: "rising", Series: []*trace.Series{s}}
}

// TestFreeHours: in a market whose hours end in evictions, BidBrain bids
// below the rise, and the hours its machines are evicted in are not
// billed: nearly all its transient compute is free and it pays for
// little but its reliable tier, if it keeps one; checkpoint-restart, bid
// at the on-demand price, is never evicted and pays every hour.
func TestFreeHours(t *testing.T) {
	cfg := testConfig(rising())
	start := t0.Add(20 * 24 * time.Hour)
	bb, err := Run(context.Background(), cfg, "bidbrain", start)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := Run(context.Background(), cfg, "checkpoint", start)
	if err != nil {
		t.Fatal(err)
	}
	if bb.FreeShare < 0.9 || bb.Evictions == 0 {
		t.Errorf("bidbrain: %.0f%% of its compute free, %d evictions; want all but the reliable tier free", 100*bb.FreeShare, bb.Evictions)
	}
	// Beyond its two on-demand machines for the hours started, it pays
	// under a tenth of what checkpoint-restart pays for the same work.
	reliable := 2 * 0.21 * math.Ceil(bb.Hours)
	if bb.Design == "elastic" {
		reliable = 0
	}
	if bb.Dollars < reliable-1e-9 || bb.Dollars-reliable > ck.Dollars/10 {
		t.Errorf("bidbrain $%.2f in %.1f h (reliable tier $%.2f), checkpoint $%.2f", bb.Dollars, bb.Hours, reliable, ck.Dollars)
	}
	if ck.FreeShare != 0 || ck.Evictions != 0 {
		t.Errorf("checkpoint at the on-demand bid: %.0f%% free, %d evictions; want none", 100*ck.FreeShare, ck.Evictions)
	}
}

// TestLastCall: once the job is done, a machine billed by the hour is
// kept until just before its paid hour ends (an eviction until then makes
// the hour free, a release does not), one in EC2's free first hour until
// just before that hour ends, and any other is let go at once.
func TestLastCall(t *testing.T) {
	cfg := testConfig(synthetic(1))
	drain := cfg.Cal.Drain()
	spot := market.Machine{Class: market.Transient, Requested: t0}
	cases := []struct {
		name  string
		model billing.Model
		m     market.Machine
		fin   time.Duration
		want  time.Duration
	}{
		{"2015: mid second hour", billing.Bid2015{}, spot, 80 * time.Minute, 2*time.Hour - drain},
		{"2015: within the drain of the boundary", billing.Bid2015{}, spot, 2*time.Hour - drain/2, 2*time.Hour - drain/2},
		{"2015: on the boundary", billing.Bid2015{}, spot, 2 * time.Hour, 2 * time.Hour},
		{"2015: on-demand", billing.Bid2015{}, market.Machine{Class: market.Reliable, Requested: t0}, 80 * time.Minute, 80 * time.Minute},
		{"AWS: first hour", billing.AWS, spot, 20 * time.Minute, time.Hour - drain},
		{"AWS: later", billing.AWS, spot, 80 * time.Minute, 80 * time.Minute},
		{"GCP", billing.GCP, spot, 20 * time.Minute, 20 * time.Minute},
	}
	for _, c := range cases {
		cfg.Model = c.model
		r := &run{cfg: cfg}
		if got := r.lastCall(c.m, t0.Add(c.fin)); !got.Equal(t0.Add(c.want)) {
			t.Errorf("%s: %v, want %v", c.name, got.Sub(t0), c.want)
		}
	}
}

// halves is a 1-node preemption trace of the given length whose machine
// is taken back for ten minutes of every hour until calm, and never after.
func halves(source string, length, calm time.Duration) *trace.Availability {
	a := &trace.Availability{Source: source, Size: 1, End: length}
	for at := time.Duration(0); at < calm; at += time.Hour {
		a.Offsets = append(a.Offsets, at, at+50*time.Minute)
		a.Counts = append(a.Counts, 1, 0)
	}
	a.Offsets = append(a.Offsets, calm)
	a.Counts = append(a.Counts, 1)
	return a
}

// TestSweepSpreadsPreemptions: the starts of a sweep sit at different
// places in a preemption trace, moving with the start (they all sat at
// its Lead, so a sweep sampled only the prices): on a 20-day trace that
// evicts every hour until day 12 and never after, the first start (at
// day 10, its Lead) is evicted and the second (past day 14) is not.
func TestSweepSpreadsPreemptions(t *testing.T) {
	cfg := testConfig(synthetic(3))
	cfg.Model = billing.GCP
	cfg.Avail = []*trace.Availability{halves("halves.json", 20*24*time.Hour, 12*24*time.Hour)}
	var progress strings.Builder
	cfg.Progress = &progress
	starts := []time.Time{t0.Add(15 * 24 * time.Hour), t0.Add(25 * 24 * time.Hour)}
	rep, err := Sweep(context.Background(), cfg, []string{"ondemand", "checkpoint"}, starts)
	if err != nil {
		t.Fatal(err)
	}
	// The starts spread over [10 d, 20 d − d], d twice the on-demand
	// reference's hours (6.3), the second at half of it.
	d := SpreadMargin * rep.Runs[0].Policies["ondemand"].Hours
	if math.Abs(rep.ExpectedHours-d) > 1e-9 || d < 12 || d > 14 || rep.NotSpread != nil {
		t.Errorf("expected %v h, not spread %v; want %v h, all spread", rep.ExpectedHours, rep.NotSpread, d)
	}
	want := []float64{240, 240 + (240-d)/2}
	for i, r := range rep.Runs {
		if len(r.Preemptions) != 1 || r.Preemptions[0].Trace != "halves.json" || math.Abs(r.Preemptions[0].AtHours-want[i]) > 1e-6 || r.Preemptions[0].LengthHours != 480 {
			t.Errorf("start %d sat at %+v, want %v h of halves.json's 480", i, r.Preemptions, want[i])
		}
	}
	first, second := rep.Runs[0].Policies["checkpoint"], rep.Runs[1].Policies["checkpoint"]
	if first.Evictions == 0 || second.Evictions != 0 || first.Unfinished || second.Unfinished {
		t.Errorf("checkpoint: %d evictions from the first start, %d from the second; want some, then none", first.Evictions, second.Evictions)
	}
	if !strings.Contains(progress.String(), "start 2/2 "+starts[1].Format(time.RFC3339)+" sits in the preemption traces at 353.7 h of halves.json's 480.0") {
		t.Errorf("progress does not say where the second start sat:\n%s", progress.String())
	}
}

// TestSweepShortPreemptionTrace: a trace that cannot hold the job's
// expected duration after its Lead keeps every start at the Lead, and
// the sweep says so once, naming it.
func TestSweepShortPreemptionTrace(t *testing.T) {
	cfg := testConfig(synthetic(3))
	cfg.Model = billing.GCP
	// 10 h past, 10 h ahead: less than the 12.6 h expected.
	cfg.Avail = []*trace.Availability{{Source: "short.txt", Offsets: []time.Duration{0}, Counts: []int{1}, Size: 1, End: 20 * time.Hour}}
	var progress strings.Builder
	cfg.Progress = &progress
	starts := []time.Time{t0.Add(15 * 24 * time.Hour), t0.Add(20 * 24 * time.Hour), t0.Add(25 * 24 * time.Hour)}
	rep, err := Sweep(context.Background(), cfg, []string{"ondemand", "checkpoint"}, starts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.NotSpread, []string{"short.txt"}) {
		t.Errorf("not spread %v, want short.txt", rep.NotSpread)
	}
	for i, r := range rep.Runs {
		if len(r.Preemptions) != 1 || r.Preemptions[0].AtHours != 10 {
			t.Errorf("start %d sat at %+v, want 10 h (the Lead)", i, r.Preemptions)
		}
	}
	if n := strings.Count(progress.String(), "every start sits at the same place in the preemption trace short.txt, 10.0 h in"); n != 1 {
		t.Errorf("said %d times that short.txt is too short, want once:\n%s", n, progress.String())
	}
}

// TestSpread: where each start sits in traces of 11 hours to 45 days, for
// the first of any number of starts (and a single run) at the Lead.
func TestSpread(t *testing.T) {
	day := 24 * time.Hour
	cfg := Config{Avail: []*trace.Availability{{End: 45 * day}, {End: 7 * day}, {End: 11 * time.Hour}}}
	for _, c := range []struct {
		i, n int
		d    time.Duration
		at   []time.Duration
		kept []int
	}{
		{0, 1, 2 * day, []time.Duration{14 * day, 3.5 * 24 * time.Hour, 5.5 * 60 * time.Minute}, []int{2}},
		{0, 4, 2 * day, []time.Duration{14 * day, 3.5 * 24 * time.Hour, 5.5 * 60 * time.Minute}, []int{2}},
		{2, 4, 2 * day, []time.Duration{14*day + 29*day/2, 3.5*24*time.Hour + 36*time.Hour/2, 5.5 * 60 * time.Minute}, []int{2}},
		{3, 4, 5 * time.Hour, []time.Duration{14*day + 3*(31*day-5*time.Hour)/4, 3.5*24*time.Hour + 3*(84*time.Hour-5*time.Hour)/4, 5.5*60*time.Minute + 3*(30*time.Minute)/4}, nil},
		{1, 2, 0, []time.Duration{14 * day, 3.5 * 24 * time.Hour, 5.5 * 60 * time.Minute}, []int{0, 1, 2}},
	} {
		at, kept := cfg.Spread(c.i, c.n, c.d)
		if !slices.Equal(at, c.at) || !slices.Equal(kept, c.kept) {
			t.Errorf("start %d of %d, %v expected: at %v kept %v, want %v %v", c.i, c.n, c.d, at, kept, c.at, c.kept)
		}
	}
}

// TestSweepOneStartKeepsLead: a single start sits at each preemption
// trace's Lead, as before the starts were spread, and its run is the one
// Run makes without a placement; the report says where it sat.
func TestSweepOneStartKeepsLead(t *testing.T) {
	cfg := testConfig(synthetic(3))
	cfg.Model = billing.GCP
	cfg.Avail = []*trace.Availability{halves("halves.json", 20*24*time.Hour, 12*24*time.Hour)}
	start := t0.Add(15 * 24 * time.Hour)
	rep, err := Sweep(context.Background(), cfg, []string{"checkpoint"}, []time.Time{start})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.PreemptionsAt) != 1 || rep.PreemptionsAt[0].AtHours != 240 || rep.ExpectedHours != 0 {
		t.Errorf("one start sat at %+v (expected %v h), want 240 h of halves.json, nothing spread", rep.PreemptionsAt, rep.ExpectedHours)
	}
	want, err := Run(context.Background(), cfg, "checkpoint", start)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Policies["checkpoint"]; got.Dollars != want.Dollars || got.Evictions != want.Evictions || want.Evictions == 0 {
		t.Errorf("one start: %+v, want Run's %+v", got, want)
	}
}
