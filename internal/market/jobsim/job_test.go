package jobsim

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
)

var t0 = time.Date(2015, 3, 1, 0, 0, 0, 0, time.UTC)

func machine(id int, class market.Class) market.Machine {
	return market.Machine{ID: market.MachineID(id), Class: class, Market: market.Market{Zone: "z", Type: "c3.xlarge"}}
}

func event(kind market.EventKind, at time.Duration, m market.Machine) market.Event {
	return market.Event{Kind: kind, At: t0.Add(at), Machine: m, Deadline: t0.Add(at + 2*time.Minute), By: market.ByProvider}
}

func step(j *Job, at time.Duration, ev ...market.Event) {
	j.AdvanceTo(t0.Add(at))
	for _, e := range ev {
		if err := j.Handle(e); err != nil {
			panic(err)
		}
	}
}

func quiet() Calibration {
	c := DefaultCalibration()
	c.JoinSeconds, c.SwitchPauseSeconds = 0, 0
	return c
}

// TestTieredFallsBackAndLosesNothing: transient machines lift the job to
// stage 3; when all of them are evicted with notice it falls back to stage
// 1 and loses nothing.
func TestTieredFallsBackAndLosesNothing(t *testing.T) {
	c := quiet()
	c.SwitchPauseSeconds = 1
	j := New(c, Tiered, 0, 1e12, t0)
	step(j, 0, event(market.Ready, 0, machine(1, market.Reliable)), event(market.Ready, 0, machine(2, market.Reliable)))
	var evs []market.Event
	for i := 3; i < 103; i++ {
		evs = append(evs, event(market.Ready, time.Minute, machine(i, market.Transient)))
	}
	step(j, time.Minute, evs...)
	if j.stage != 3 {
		t.Fatalf("stage %d with 100 transient machines, want 3", j.stage)
	}
	evs = evs[:0]
	for i := 3; i < 103; i++ {
		evs = append(evs, event(market.Notice, time.Hour, machine(i, market.Transient)))
	}
	step(j, time.Hour, evs...)
	evs = evs[:0]
	for i := 3; i < 103; i++ {
		evs = append(evs, event(market.Gone, time.Hour+2*time.Minute, machine(i, market.Transient)))
	}
	step(j, time.Hour+2*time.Minute, evs...)
	if j.stage != 1 || j.Lost != 0 || len(j.Switches) != 3 {
		t.Errorf("stage %d, lost %v, switches %+v; want 1, 0, three (1→2→3 or 1→3, then back)", j.stage, j.Lost, j.Switches)
	}
	if want := 2 * 14 * c.UpdatesPerECUHour; j.Status().Rate != want {
		t.Errorf("stage 1 rate %v, want %v (the two reliable machines' workers)", j.Status().Rate, want)
	}
}

// TestFlatRollsBack: a flat job checkpoints, loses a machine, rolls back
// to the checkpoint and restarts once it has its machines again.
func TestFlatRollsBack(t *testing.T) {
	c := quiet()
	j := New(c, Flat, 2, 1e12, t0)
	step(j, 0, event(market.Ready, 0, machine(1, market.Transient)), event(market.Ready, 0, machine(2, market.Transient)))
	rate := j.Status().Rate
	if want := 2 * 14 * 3600.0; rate != want {
		t.Fatalf("rate %v, want %v", rate, want)
	}
	j.AdvanceTo(t0.Add(time.Hour))
	if err := j.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	step(j, 2*time.Hour, event(market.Gone, 2*time.Hour, machine(1, market.Transient)))
	saved := rate * 1 // the work of the first hour; the save paused the job after it
	if math.Abs(j.done-saved) > 1e-6 || math.Abs(j.Lost-rate*(1-c.Transfer(2).Hours())) > 1e-6 {
		t.Errorf("done %v lost %v; want %v and %v", j.done, j.Lost, saved, rate*(1-c.Transfer(2).Hours()))
	}
	if j.Status().Rate != 0 {
		t.Error("working with one of two machines")
	}
	step(j, 3*time.Hour, event(market.Ready, 3*time.Hour, machine(3, market.Transient)))
	if j.Status().Rate != 0 {
		t.Errorf("working while the checkpoint is read back: rate %v", j.Status().Rate)
	}
	// The restore reads the model state back at the storage rate, each
	// of the two machines its half.
	j.AdvanceTo(t0.Add(3*time.Hour + c.Transfer(2)))
	if j.Status().Rate != rate {
		t.Errorf("not restarted after %v: rate %v", c.Transfer(2), j.Status().Rate)
	}
}

// TestFinishes: the job ends when its work is done, at the exact time.
func TestFinishes(t *testing.T) {
	j := New(quiet(), Tiered, 0, 1000, t0)
	step(j, 0, event(market.Ready, 0, machine(1, market.Reliable)))
	r := j.Status().Rate
	j.AdvanceTo(t0.Add(100 * time.Hour))
	want := t0.Add(time.Duration(1000 / r * float64(time.Hour)))
	if d := j.Finished().Sub(want); d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("finished at %v, want %v", j.Finished(), want)
	}
}

func TestCalibration(t *testing.T) {
	if err := DefaultCalibration().Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultCalibration()
	c.ReferenceType = "x1.32xlarge"
	if err := c.Validate(); err == nil {
		t.Error("a reference type with no rate was accepted")
	}
}

// TestWithReference: another reference type keeps the reference's work
// rate (machines scaled by the types' rates) and refuses a type with no
// rate.
func TestWithReference(t *testing.T) {
	c := DefaultCalibration()
	was, _ := c.Rate(c.ReferenceType)
	d, err := c.WithReference("c3.2xlarge")
	if err != nil {
		t.Fatal(err)
	}
	now, _ := d.Rate(d.ReferenceType)
	if d.ReferenceType != "c3.2xlarge" || d.Machines != 16 || d.MaxMachines != 64 {
		t.Errorf("c3.2xlarge: %s, %d machines, max %d; want 16 and 64", d.ReferenceType, d.Machines, d.MaxMachines)
	}
	if got, want := float64(d.Machines)*now, float64(c.Machines)*was; got != want {
		t.Errorf("reference rate %v, want %v", got, want)
	}
	if _, err := c.WithReference("x9.huge"); !errors.Is(err, ErrNoRate) {
		t.Errorf("a type with no rate: %v, want ErrNoRate", err)
	}
	if err := d.Validate(); err != nil {
		t.Error(err)
	}
}

func TestEstimatedECU(t *testing.T) {
	for typ, want := range map[string]float64{
		"m5.large": 7, "c5.xlarge": 14, "r6i.2xlarge": 28, "m5.24xlarge": 336, "a1.medium": 3.5, "p3.16xlarge": 224,
		"n1-standard-8": 28, "e2-highcpu-2": 7,
	} {
		if got, ok := EstimatedECU(typ); !ok || got != want {
			t.Errorf("%s: %g, %v; want %g", typ, got, ok, want)
		}
	}
	for _, typ := range []string{"t3.micro", "t2.nano", "m5.metal", "m5.xlargex", "custom-4-15360", "weird", "c5.0xlarge"} {
		if got, ok := EstimatedECU(typ); ok {
			t.Errorf("%s: estimated %g, want none (its vCPUs are not in its name)", typ, got)
		}
	}
}
