package planner

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/internal/placement/tier"
)

func mbps(x float64) float64 { return x * 1e6 / 8 }

func candidate(t *testing.T, cs []Candidate, s tier.Stage) Candidate {
	t.Helper()
	for _, c := range cs {
		if c.Stage == s {
			return c
		}
	}
	t.Fatalf("no candidate for stage %d in %+v", s, cs)
	return Candidate{}
}

// TestLockstepIsTheLeastLimit: in lockstep every worker makes as many
// updates as every other, so a stage runs at the least of its resources'
// limits; the network and its max-flow must agree with that on random
// measurements.
func TestLockstepIsTheLeastLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 100 {
		m := Defaults(1+r.IntN(5), r.IntN(9))
		m.WorkersPerMachine = 1 + r.IntN(3)
		m.Replication = 1 + r.IntN(3)
		m.WorkerUpdates = tier.ByClass{Reliable: 1000 + 5000*r.Float64(), Transient: 1000 + 5000*r.Float64()}
		m.LinkBytes = tier.ByClass{Reliable: mbps(5 + 500*r.Float64()), Transient: mbps(5 + 500*r.Float64())}
		m.ServerUpdates = tier.ByClass{Reliable: 20000 * r.Float64(), Transient: 20000 * r.Float64()}
		m.HostUpdates = 40000 * r.Float64()
		m.BackupIngestBytes = mbps(1000 * r.Float64())
		m.ModelStateBytes = 0
		cs, err := Evaluate(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			want := math.Inf(1)
			var names []string
			for _, res := range c.Resources {
				if res.Limit < want*(1-1e-9) {
					want, names = res.Limit, nil
				}
				if res.Limit <= want*(1+1e-9) {
					names = append(names, res.Name)
				}
			}
			if math.Abs(c.UpdatesPerSecond-want) > 1e-6*want {
				t.Fatalf("trial %d stage %d: %g updates/s, least limit %g (%+v)", trial, c.Stage, c.UpdatesPerSecond, want, c.Resources)
			}
			if len(c.Bottleneck) == 0 || !slices.Contains(names, c.Bottleneck[0]) {
				t.Fatalf("trial %d stage %d: bottleneck %v, least limits %v", trial, c.Stage, c.Bottleneck, names)
			}
		}
	}
}

// TestHandComputed: one reliable and one transient machine, one worker
// each, k = 1, round numbers. Stage 1: the transient worker's 1000 up and
// 500 down bytes cross both links; the reliable worker's stay on its
// machine. The reliable link's inbound direction carries 1000 bytes per
// transient update, half the updates: 100,000 B/s allows 200 updates/s.
func TestHandComputed(t *testing.T) {
	m := Measurements{
		Reliable: 1, Transient: 1, Replication: 1,
		WorkerUpdates: tier.ByClass{Reliable: 1000, Transient: 1000},
		UpBytes:       1000, DownBytes: 500, StreamBytes: 10, LedgerBytes: 0,
		LinkBytes: tier.ByClass{Reliable: 100000, Transient: 1e6},
		Price:     tier.ByClass{Reliable: 1, Transient: 0.25},
	}
	cs, err := Evaluate(m)
	if err != nil {
		t.Fatal(err)
	}
	s1 := candidate(t, cs, tier.Stage1)
	if math.Abs(s1.UpdatesPerSecond-200) > 1e-6 || !slices.Equal(s1.Bottleneck, []string{"link.reliable.in"}) {
		t.Errorf("stage 1: %g updates/s, bottleneck %v; want 200, [link.reliable.in]", s1.UpdatesPerSecond, s1.Bottleneck)
	}
	if math.Abs(s1.UpdatesPerDollar-200*3600/1.25) > 1e-6 {
		t.Errorf("stage 1: %g updates per dollar", s1.UpdatesPerDollar)
	}
	// Stage 2: the ActivePS is on the transient machine. The reliable
	// worker's 1000 up bytes leave its machine, plus 10 stream bytes per
	// update (either class) come in: out 1000·½ = 500, in 500·½ + 10 =
	// 260 per update: 200 updates/s on the outbound side.
	s2 := candidate(t, cs, tier.Stage2)
	if math.Abs(s2.UpdatesPerSecond-200) > 1e-6 || !slices.Equal(s2.Bottleneck, []string{"link.reliable.out"}) {
		t.Errorf("stage 2: %g updates/s, bottleneck %v; want 200, [link.reliable.out]", s2.UpdatesPerSecond, s2.Bottleneck)
	}
	// Stage 3: only the transient worker, which keeps its traffic on its
	// machine; the reliable link carries the stream only. Its processors
	// bound it: 1000 updates/s.
	s3 := candidate(t, cs, tier.Stage3)
	if math.Abs(s3.UpdatesPerSecond-1000) > 1e-6 || !slices.Equal(s3.Bottleneck, []string{"compute.transient"}) {
		t.Errorf("stage 3: %g updates/s, bottleneck %v; want 1000, [compute.transient]", s3.UpdatesPerSecond, s3.Bottleneck)
	}
	p, err := New(Options{}).Replan(t0, m)
	if err != nil || p.Stage != tier.Stage3 {
		t.Errorf("plan %+v, %v: want stage 3", p, err)
	}
}

// TestReliableLinksTheBottleneck is the scenario: with the
// reliable machines' links the bottleneck, stage 2 or 3 must be worth at
// least 1.5 times stage 1, and the planner must pick one of them.
func TestReliableLinksTheBottleneck(t *testing.T) {
	m := Defaults(2, 6)
	m.LinkBytes = tier.ByClass{Reliable: mbps(50), Transient: mbps(1000)}
	cs, err := Evaluate(m)
	if err != nil {
		t.Fatal(err)
	}
	s1 := candidate(t, cs, tier.Stage1)
	if !strings.HasPrefix(s1.Bottleneck[0], "link.reliable") {
		t.Errorf("stage 1 bottleneck %v, want a reliable link", s1.Bottleneck)
	}
	b := best(cs)
	if b.Stage == tier.Stage1 || b.UpdatesPerSecond < 1.5*s1.UpdatesPerSecond {
		t.Errorf("best stage %d at %.0f updates/s against stage 1's %.0f", b.Stage, b.UpdatesPerSecond, s1.UpdatesPerSecond)
	}
	// With fast reliable links every stage is bound by the workers'
	// processors; stages 1 and 2 run the same workers and cost the same,
	// and the tie goes to the simpler stage.
	m.LinkBytes = tier.ByClass{Reliable: mbps(10000), Transient: mbps(10000)}
	cs, _ = Evaluate(m)
	if b := best(cs); b.Stage != tier.Stage1 || !strings.HasPrefix(b.Bottleneck[0], "compute") {
		t.Errorf("fast links: best stage %d, bottleneck %v; want 1, compute", b.Stage, b.Bottleneck)
	}
}

// TestStreamCap: with a large model and a slow reliable link, streaming
// the whole model every interval is what bounds stages 2 and 3, however
// small the per-update stream is.
func TestStreamCap(t *testing.T) {
	m := Defaults(1, 4)
	m.LinkBytes = tier.ByClass{Reliable: mbps(100), Transient: mbps(10000)}
	m.StreamBytes = 100
	m.ModelStateBytes, m.SyncSeconds = 20e6, 1 // 20 MB a second of a 12.5 MB/s link
	cs, err := Evaluate(m)
	if err != nil {
		t.Fatal(err)
	}
	s3 := candidate(t, cs, tier.Stage3)
	// fx = 20e6/100 = 200,000 updates/s is above what the workers do, so
	// the linear regime holds: 4 workers' processors.
	if math.Abs(s3.UpdatesPerSecond-4*4150) > 1e-6*4*4150 {
		t.Errorf("stage 3: %g updates/s, want the workers' %d", s3.UpdatesPerSecond, 4*4150)
	}
	m.StreamBytes = 2000 // fx = 10,000 updates/s
	cs, _ = Evaluate(m)
	s3 = candidate(t, cs, tier.Stage3)
	// Linear: the reliable inbound link carries 2000+16 bytes per update:
	// 12.5e6/2016 = 6,200 updates/s, under fx, so that regime holds.
	if want := mbps(100) / 2016; math.Abs(s3.UpdatesPerSecond-want) > 1e-6*want || s3.Bottleneck[0] != "link.reliable.in" {
		t.Errorf("stage 3: %g updates/s, bottleneck %v; want %g, link.reliable.in", s3.UpdatesPerSecond, s3.Bottleneck, want)
	}
	m.ModelStateBytes = 5e6 // fx = 2,500: the stream is the whole model, 5 MB/s
	cs, _ = Evaluate(m)
	s3 = candidate(t, cs, tier.Stage3)
	// 7.5 MB/s of the reliable link are left for 16-byte ledger entries:
	// far more than the workers' processors need.
	if want := 4 * 4150.0; math.Abs(s3.UpdatesPerSecond-want) > 1e-6*want || s3.Bottleneck[0] != "compute.transient" {
		t.Errorf("stage 3 with the whole model streamed: %g updates/s, bottleneck %v; want %g, compute.transient", s3.UpdatesPerSecond, s3.Bottleneck, want)
	}
	m.ModelStateBytes = 12.4e6 // 0.1 MB/s left: 6,250 ledger entries a second
	cs, _ = Evaluate(m)
	s3 = candidate(t, cs, tier.Stage3)
	if want := (mbps(100) - 12.4e6) / 16; math.Abs(s3.UpdatesPerSecond-want) > 1e-6*want || s3.Bottleneck[0] != "link.reliable.in" {
		t.Errorf("stage 3 with the link nearly full of stream: %g updates/s, bottleneck %v; want %g, link.reliable.in", s3.UpdatesPerSecond, s3.Bottleneck, want)
	}
}

// TestIndependentWorkers: without lockstep, the transient workers held
// back by their link do not hold back the reliable ones.
func TestIndependentWorkers(t *testing.T) {
	m := Measurements{
		Reliable: 1, Transient: 1, Replication: 1,
		WorkerUpdates: tier.ByClass{Reliable: 1000, Transient: 1000},
		UpBytes:       1000, DownBytes: 100,
		LinkBytes: tier.ByClass{Reliable: 1e9, Transient: 300000},
		Price:     tier.ByClass{Reliable: 1, Transient: 0.25},
	}
	cs, _ := Evaluate(m)
	lock := candidate(t, cs, tier.Stage1)
	m.Independent = true
	cs, _ = Evaluate(m)
	ind := candidate(t, cs, tier.Stage1)
	// The transient worker's 1000 up bytes over 300,000 B/s: 300
	// updates/s. In lockstep the reliable worker waits: 600 in all.
	if math.Abs(lock.UpdatesPerSecond-600) > 1e-6 || math.Abs(ind.UpdatesPerSecond-1300) > 1e-6 {
		t.Errorf("lockstep %g (want 600), independent %g (want 1300)", lock.UpdatesPerSecond, ind.UpdatesPerSecond)
	}
	if !slices.Equal(ind.Bottleneck, []string{"compute.reliable", "link.transient.out"}) {
		t.Errorf("independent bottleneck %v", ind.Bottleneck)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Measurements)
		want string
	}{
		{func(m *Measurements) { m.Reliable = 0 }, "Reliable = 0"},
		{func(m *Measurements) { m.UpBytes = math.NaN() }, "UpBytes = NaN"},
		{func(m *Measurements) { m.LinkBytes.Transient = -1 }, "LinkBytes.Transient = -1"},
		{func(m *Measurements) { m.WorkerUpdates.Transient = 0 }, "WorkerUpdates"},
		{func(m *Measurements) { m.Price.Transient = 0 }, "Price"},
		{func(m *Measurements) { m.SyncSeconds = 0 }, "ModelStateBytes without SyncSeconds"},
	} {
		m := Defaults(2, 2)
		tc.edit(&m)
		_, err := Evaluate(m)
		if !errors.Is(err, ErrMeasurements) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: want %q", err, tc.want)
		}
	}
	cs, err := Evaluate(Defaults(3, 0))
	if err != nil || len(cs) != 1 || cs[0].Stage != tier.Stage1 {
		t.Errorf("no transient machine: %+v, %v; want stage 1 alone", cs, err)
	}
}
