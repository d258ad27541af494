package jobsim

import (
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
)

// revoking is a calibration whose drain is longer than the two-minute
// notice, so that every eviction is a revocation without enough notice,
// as on processes replayed in compressed time.
func revoking(k int) Calibration {
	c := quiet()
	c.DrainSeconds, c.RevocationSeconds, c.SwitchPauseSeconds, c.JoinSeconds, c.Replication = 600, 900, 60, 60, k
	return c
}

// TestRevocationFallsBackUntilAJoin: losing the ActivePS without enough
// notice stops the job for the failure timeout and falls back to stage 1
// at once; a surviving transient machine does not lift it back (it is on
// standby), a transient machine that joins does, through a switch.
func TestRevocationFallsBackUntilAJoin(t *testing.T) {
	c := revoking(1)
	j := New(c, Tiered, 0, 1e12, t0)
	evs := []market.Event{event(market.Ready, 0, machine(1, market.Reliable))}
	for i := 2; i < 8; i++ {
		evs = append(evs, event(market.Ready, 0, machine(i, market.Transient)))
	}
	step(j, 0, evs...)
	if j.stage < 2 {
		t.Fatalf("stage %d with six transient machines, want 2 or 3", j.stage)
	}
	up := j.stage
	step(j, time.Hour, event(market.Notice, time.Hour, machine(2, market.Transient)))
	if j.stage != 1 || j.Revocations != 1 {
		t.Fatalf("stage %d, %d revocations after losing one ActivePS with k=1; want 1, 1", j.stage, j.Revocations)
	}
	if r := j.Status().Rate; r != 0 {
		t.Errorf("rate %v during the failure timeout, want 0", r)
	}
	j.AdvanceTo(t0.Add(time.Hour + c.Revocation() + time.Second))
	if j.stage != 1 || j.Status().Rate == 0 {
		t.Errorf("stage %d rate %v after the timeout with a transient machine on standby; want stage 1, working", j.stage, j.Status().Rate)
	}
	step(j, 2*time.Hour, event(market.Gone, 2*time.Hour, machine(2, market.Transient)),
		event(market.Ready, 2*time.Hour, machine(8, market.Transient)))
	if j.stage != 1 {
		t.Errorf("stage %d before the joiner works, want 1", j.stage)
	}
	j.AdvanceTo(t0.Add(3 * time.Hour))
	if j.stage != up {
		t.Errorf("stage %d after a transient machine joined, want %d", j.stage, up)
	}
	if n := len(j.Switches); n != 3 {
		t.Errorf("%d switches (%+v), want 3: up, the fallback, up again", n, j.Switches)
	}
}

// TestRevocationNeedsKLosses: with chains of two, one revoked ActivePS of
// six leaves the job in its stage; a second falls back.
func TestRevocationNeedsKLosses(t *testing.T) {
	j := New(revoking(2), Tiered, 0, 1e12, t0)
	evs := []market.Event{event(market.Ready, 0, machine(1, market.Reliable))}
	for i := 2; i < 8; i++ {
		evs = append(evs, event(market.Ready, 0, machine(i, market.Transient)))
	}
	step(j, 0, evs...)
	up := j.stage
	gone := market.Event{Kind: market.Gone, At: t0.Add(time.Hour), Machine: machine(2, market.Transient), By: market.ByProvider}
	step(j, time.Hour, gone)
	if j.stage != up || j.Revocations != 1 {
		t.Fatalf("stage %d, %d revocations after one loss with k=2; want %d, 1", j.stage, j.Revocations, up)
	}
	gone.Machine, gone.At = machine(3, market.Transient), t0.Add(2*time.Hour)
	step(j, 2*time.Hour, gone)
	if j.stage != 1 {
		t.Errorf("stage %d after two losses with k=2, want 1", j.stage)
	}
}

// TestNoticeLongerThanDrainIsNoRevocation: a machine that drains in time
// costs no failure timeout.
func TestNoticeLongerThanDrainIsNoRevocation(t *testing.T) {
	c := revoking(1)
	c.DrainSeconds = 10
	j := New(c, Tiered, 0, 1e12, t0)
	step(j, 0, event(market.Ready, 0, machine(1, market.Reliable)), event(market.Ready, 0, machine(2, market.Transient)))
	step(j, time.Hour, event(market.Notice, time.Hour, machine(2, market.Transient)))
	j.AdvanceTo(t0.Add(time.Hour + 2*time.Minute))
	if j.Revocations != 0 || j.fellBack || j.Lost != 0 {
		t.Errorf("revocations %d, fell back %v, lost %v after a drain in time", j.Revocations, j.fellBack, j.Lost)
	}
}

// TestHostCap: on a shared host a third machine adds nothing; without the
// cap (real machines) it does.
func TestHostCap(t *testing.T) {
	for _, host := range []float64{0, 1.5 * 14 * 3600} {
		c := quiet()
		c.HostUpdatesPerHour = host
		j := New(c, Flat, 3, 1e12, t0)
		step(j, 0, event(market.Ready, 0, machine(1, market.Reliable)), event(market.Ready, 0, machine(2, market.Reliable)),
			event(market.Ready, 0, machine(3, market.Reliable)))
		want := 3 * 14 * 3600.0
		if host > 0 {
			want = host
		}
		if r := j.Status().Rate; r != want {
			t.Errorf("host cap %v: rate %v, want %v", host, r, want)
		}
	}
}

// TestStartPaidOnce: the job's own start delays its first machines; a
// machine that comes later pays its join, not the start.
func TestStartPaidOnce(t *testing.T) {
	c := quiet()
	c.StartSeconds, c.JoinSeconds = 3600, 60
	j := New(c, Tiered, 0, 1e12, t0)
	step(j, 5*time.Minute, event(market.Ready, 5*time.Minute, machine(1, market.Reliable)))
	if j.Status().Rate != 0 {
		t.Error("working before the job's start has ended")
	}
	j.AdvanceTo(t0.Add(time.Hour))
	if j.Status().Rate == 0 {
		t.Error("not working once the start has ended")
	}
	step(j, 2*time.Hour, event(market.Ready, 2*time.Hour, machine(2, market.Reliable)))
	if got := j.members[2].workFrom.Sub(t0); got != 2*time.Hour+time.Minute {
		t.Errorf("a later machine works from %v, want its join after it came up (2h1m)", got)
	}
}

// TestFixedStage: asked for stage 2 (the coordinator's --stage 2), the
// job switches to it when a transient machine joins even where stage 1
// would be faster (a host where one machine alone trains fastest), and
// back to 1 when no transient machine is left.
func TestFixedStage(t *testing.T) {
	c := quiet()
	c.Stage = 2
	c.HostUpdatesPerHourByStage = map[string]float64{"1": 5000, "2": 3000}
	j := New(c, Tiered, 0, 1e12, t0)
	step(j, 0, event(market.Ready, 0, machine(1, market.Reliable)))
	step(j, time.Hour, event(market.Ready, time.Hour, machine(2, market.Transient)))
	if j.stage != 2 || j.Status().Rate != 3000 {
		t.Fatalf("stage %d rate %v with a transient machine, want stage 2 at the host's 3000", j.stage, j.Status().Rate)
	}
	step(j, 2*time.Hour, event(market.Notice, 2*time.Hour, machine(2, market.Transient)))
	j.AdvanceTo(t0.Add(3 * time.Hour))
	if j.stage != 1 || j.Status().Rate != 5000 {
		t.Errorf("stage %d rate %v on the reliable machine alone, want stage 1 at 5000", j.stage, j.Status().Rate)
	}
}

// TestAtSpeedup: processes measured at 900x run four times slower per
// trace hour at 3600x, and their own times are four times longer; the
// provider's boot does not change.
func TestAtSpeedup(t *testing.T) {
	c := quiet()
	c.Speedup, c.StartSeconds, c.HostUpdatesPerHourByStage = 900, 100, map[string]float64{"2": 4000}
	d := c.AtSpeedup(3600)
	if d.StartSeconds != 400 || d.HostUpdatesPerHourByStage["2"] != 1000 || d.BootSeconds != c.BootSeconds || d.Speedup != 3600 {
		t.Errorf("at 3600x: start %v host %v boot %v speedup %v; want 400, 1000, %v, 3600",
			d.StartSeconds, d.HostUpdatesPerHourByStage["2"], d.BootSeconds, c.BootSeconds, d.Speedup)
	}
	if c.HostUpdatesPerHourByStage["2"] != 4000 {
		t.Error("AtSpeedup changed the calibration it was called on")
	}
	if e := DefaultCalibration().AtSpeedup(3600); e.JoinSeconds != DefaultCalibration().JoinSeconds {
		t.Error("a calibration of real machines was rescaled")
	}
}

// TestRestartPaysTheStart: a flat job's restart starts its processes
// again, then reads its checkpoint back.
func TestRestartPaysTheStart(t *testing.T) {
	c := quiet()
	c.StartSeconds = 600
	j := New(c, Flat, 1, 1e12, t0)
	step(j, 0, event(market.Ready, 0, machine(1, market.Transient)))
	gone := market.Event{Kind: market.Gone, At: t0.Add(time.Hour), Machine: machine(1, market.Transient), By: market.ByProvider}
	step(j, time.Hour, gone)
	step(j, 2*time.Hour, event(market.Ready, 2*time.Hour, machine(2, market.Transient)))
	back := t0.Add(2*time.Hour + 10*time.Minute + c.Transfer(1))
	j.AdvanceTo(back.Add(-time.Second))
	if j.Status().Rate != 0 {
		t.Error("working before the restart's start and read-back have ended")
	}
	j.AdvanceTo(back)
	if j.Status().Rate == 0 {
		t.Error("not working after the restart's start and read-back")
	}
}
