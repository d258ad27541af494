package jobsim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
)

// TestElasticDrainsAndRollsBack: an elastic job drains a machine on
// notice and loses nothing, survives one machine lost without notice
// (its chain's other copy) at the cost of the failure timeout, and rolls
// back to its checkpoint only when its last machine goes; it restarts
// once a machine has joined, after reading the checkpoint back.
func TestElasticDrainsAndRollsBack(t *testing.T) {
	c := quiet()
	c.Replication = 2
	j := New(c, Elastic, 0, 1e12, t0)
	step(j, 0, event(market.Ready, 0, machine(1, market.Transient)), event(market.Ready, 0, machine(2, market.Transient)),
		event(market.Ready, 0, machine(3, market.Transient)))
	three := j.Status().Rate
	if want := 3 * 14 * 3600.0; three != want || j.Status().Stage != 0 {
		t.Fatalf("rate %v stage %d, want %v, 0", three, j.Status().Stage, want)
	}
	j.AdvanceTo(t0.Add(time.Hour))
	if err := j.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	saved := j.done

	// Machine 1 drains within its notice: nothing lost, no pause.
	step(j, 2*time.Hour, event(market.Notice, 2*time.Hour, machine(1, market.Transient)))
	step(j, 2*time.Hour+2*time.Minute, event(market.Gone, 2*time.Hour+2*time.Minute, machine(1, market.Transient)))
	if j.Lost != 0 || j.Revocations != 0 || j.Status().Rate != 2*14*3600.0 {
		t.Fatalf("after a drain: lost %v, %d revocations, rate %v; want 0, 0, two machines'", j.Lost, j.Revocations, j.Status().Rate)
	}

	// Machine 2 lost without notice: the failure timeout, nothing lost.
	step(j, 3*time.Hour, event(market.Gone, 3*time.Hour, machine(2, market.Transient)))
	if j.Lost != 0 || j.Revocations != 1 || j.Status().Rate != 0 {
		t.Fatalf("after a revocation: lost %v, %d revocations, rate %v; want 0, 1, 0 (the timeout)", j.Lost, j.Revocations, j.Status().Rate)
	}
	j.AdvanceTo(t0.Add(3*time.Hour + c.Revocation() + time.Second))
	if j.Status().Rate != 14*3600.0 {
		t.Fatalf("rate %v after the timeout, want one machine's", j.Status().Rate)
	}

	// The last machine drains with nowhere to go: rolled back.
	step(j, 4*time.Hour, event(market.Notice, 4*time.Hour, machine(3, market.Transient)))
	j.AdvanceTo(t0.Add(4*time.Hour + 2*time.Minute))
	before := j.done
	step(j, 4*time.Hour+2*time.Minute, event(market.Gone, 4*time.Hour+2*time.Minute, machine(3, market.Transient)))
	if math.Abs(j.Lost-(before-saved)) > 1e-6 || j.done != saved {
		t.Fatalf("the last machine gone: lost %v done %v; want %v, %v", j.Lost, j.done, before-saved, saved)
	}
	step(j, 5*time.Hour, event(market.Ready, 5*time.Hour, machine(4, market.Transient)))
	if j.Status().Rate != 0 {
		t.Errorf("working while the checkpoint is read back: rate %v", j.Status().Rate)
	}
	j.AdvanceTo(t0.Add(5*time.Hour + seconds(c.StartSeconds) + c.Transfer(1) + time.Second))
	if j.Status().Rate != 14*3600.0 {
		t.Errorf("not restarted: rate %v", j.Status().Rate)
	}
}

// TestElasticKLostAtOnce: k machines lost in the same instant without a
// drain take some slots' every copy: the job rolls back although
// machines remain.
func TestElasticKLostAtOnce(t *testing.T) {
	c := quiet()
	c.Replication = 2
	j := New(c, Elastic, 0, 1e12, t0)
	var evs []market.Event
	for i := 1; i <= 4; i++ {
		evs = append(evs, event(market.Ready, 0, machine(i, market.Transient)))
	}
	step(j, 0, evs...)
	step(j, time.Hour, event(market.Gone, time.Hour, machine(1, market.Transient)))
	if j.Lost != 0 {
		t.Fatalf("one lost of four with k=2: lost %v, want 0", j.Lost)
	}
	j.AdvanceTo(t0.Add(2 * time.Hour))
	step(j, 2*time.Hour, event(market.Gone, 2*time.Hour, machine(2, market.Transient)), event(market.Gone, 2*time.Hour, machine(3, market.Transient)))
	if j.Lost == 0 || j.done != 0 {
		t.Errorf("two lost at once with k=2: lost %v done %v; want the work since the start rolled back", j.Lost, j.done)
	}
}

// TestCheckpointAtPassBoundary: with checkpoint_pass_updates a
// checkpoint asked for inside a pass is taken at the pass's end, as the
// real coordinator takes it; the last machine lost before that boundary
// rolls the job back to the checkpoint before (here the start), and one
// lost after it to the boundary.
func TestCheckpointAtPassBoundary(t *testing.T) {
	c := quiet()
	c.Replication = 2
	rate := 14 * 3600.0 // one machine's updates an hour
	c.CheckpointPassUpdates = rate
	for _, lostAt := range []time.Duration{45 * time.Minute, 90 * time.Minute} {
		j := New(c, Elastic, 0, 1e12, t0)
		step(j, 0, event(market.Ready, 0, machine(1, market.Transient)))
		j.AdvanceTo(t0.Add(30 * time.Minute)) // half a pass
		if err := j.Checkpoint(context.Background()); err != nil {
			t.Fatal(err)
		}
		j.AdvanceTo(t0.Add(lostAt))
		before := j.done
		step(j, lostAt, event(market.Gone, lostAt, machine(1, market.Transient)))
		saved := 0.0
		if lostAt > time.Hour {
			saved = rate
		}
		if math.Abs(j.done-saved) > 1e-6 || math.Abs(j.Lost-(before-saved)) > 1e-6 {
			t.Errorf("lost at %v: done %v, lost %v; want the checkpoint at %v and %v lost", lostAt, j.done, j.Lost, saved, before-saved)
		}
	}
	// Without the option the checkpoint is of the half pass.
	c.CheckpointPassUpdates = 0
	j := New(c, Elastic, 0, 1e12, t0)
	step(j, 0, event(market.Ready, 0, machine(1, market.Transient)))
	j.AdvanceTo(t0.Add(30 * time.Minute))
	if err := j.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	j.AdvanceTo(t0.Add(90 * time.Minute))
	if st := j.Status(); math.Abs(st.Checkpointed-rate/2) > 1e-6 {
		t.Errorf("inside the pass: checkpointed %v, want %v", st.Checkpointed, rate/2)
	}
}
