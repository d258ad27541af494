package jobsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/rm"
)

// Mode is how the job survives losing machines.
type Mode int

const (
	// Tiered: reliable machines hold the state (issue 11's tiers);
	// transient machines drain on notice and the job switches stage.
	Tiered Mode = iota
	// Flat: every machine is alike and holds state; losing one stops the
	// job, which restarts from its last checkpoint once it has Need
	// machines again.
	Flat
	// Elastic: no reliable tier; every machine is a server and a worker
	// (Terrace without tiers). A machine on notice drains its slots to
	// the others before its deadline and the job goes on; a machine lost
	// without a drain costs the failure timeout, and the job's state is
	// lost only when no machine is left to hold it (the last one gone, or
	// k lost at once without a drain): the job then rolls back to its
	// last checkpoint and restarts once a machine works again
	// (docs/design/market.md, "BidBrain without a reliable tier").
	Elastic
)

// Switch is one stage switch.
type Switch struct {
	At       time.Time
	From, To int
}

// Job is a simulated training job. It implements rm.Job and is driven by
// the provider's events and AdvanceTo.
type Job struct {
	cal   Calibration
	flow  Flow
	mode  Mode
	need  int
	total float64

	now       time.Time
	done      float64
	ckpt      float64
	ckptAt    time.Time
	ckptEnd   time.Time // a checkpoint in progress ends then
	ckptValue float64
	// ckptNext > 0: a checkpoint asked for is to be taken once done
	// reaches it (a pass boundary, Calibration.CheckpointPassUpdates).
	ckptNext    float64
	pausedUntil time.Time
	restart     bool // flat: restart from the checkpoint once Need machines work
	stage       int
	started     time.Time // the job's own start (StartSeconds) ends then
	// revoked counts transient machines revoked without enough notice
	// since the last switch; fellBack says the job fell back to stage 1
	// and waits for a transient machine to join before it switches up.
	revoked   int
	revokedAt time.Time // elastic: the instant revoked counts in
	fellBack  bool
	members   map[market.MachineID]*member
	finished  time.Time

	Switches []Switch
	// Revocations counts machines lost without enough notice to drain,
	// each of which stopped the job for RevocationSeconds.
	Revocations int
	// Lost counts updates lost: rolled back to a checkpoint (flat) or
	// not streamed before a machine went without enough notice (tiered).
	Lost float64
}

type member struct {
	class    market.Class
	rate     float64
	workFrom time.Time
	leaveAt  time.Time // zero: not leaving
	// undrained: an elastic job's machine whose notice was too short to
	// drain; it is lost when it goes.
	undrained bool
}

// New returns a job of total updates starting at start. need is the
// machine count a Flat job runs with.
func New(cal Calibration, mode Mode, need int, total float64, start time.Time) *Job {
	j := &Job{cal: cal, flow: FlowOf(cal), mode: mode, need: need, total: total, now: start, ckptAt: start, members: map[market.MachineID]*member{}}
	j.started = start.Add(seconds(cal.StartSeconds))
	j.pausedUntil = j.started
	if mode == Tiered {
		j.stage = 1
	}
	if mode == Elastic {
		j.need = 1
	}
	return j
}

// Finished is when the job's work was all done (zero until then).
func (j *Job) Finished() time.Time { return j.finished }

// Status reports the job's progress.
func (j *Job) Status() rm.JobStatus {
	rate := j.rate()
	return rm.JobStatus{Done: j.done, Total: j.total, Rate: rate, Stage: j.stage, Working: rate > 0,
		Checkpointed: j.ckpt, CheckpointAt: j.ckptAt}
}

// ErrCheckpointNotFlat: a checkpoint asked of a tiered job.
var ErrCheckpointNotFlat = errors.New("checkpoints are for flat and elastic jobs")

// Checkpoint pauses the job while it saves its state; the saved work
// counts once the save ends. With Calibration.CheckpointPassUpdates the
// save starts at the next pass boundary.
func (j *Job) Checkpoint(context.Context) error {
	if j.mode == Tiered {
		return ErrCheckpointNotFlat
	}
	if j.rate() == 0 || !j.ckptEnd.IsZero() || j.ckptNext > 0 {
		return nil // nothing to save now, or a save is under way
	}
	if p := j.cal.CheckpointPassUpdates; p > 0 {
		if next := math.Ceil(j.done/p-passSlack) * p; next > j.done {
			j.ckptNext = next
			return nil
		}
	}
	j.save()
	return nil
}

// passSlack absorbs the rounding of a pass boundary reached in whole
// nanoseconds of trace time.
const passSlack = 1e-9

// save starts writing the checkpoint of the work done now.
func (j *Job) save() {
	j.ckptEnd = j.now.Add(j.cal.Transfer(j.writers()))
	j.ckptValue = j.done
	j.pausedUntil = later(j.pausedUntil, j.ckptEnd)
}

// Handle applies a provider event at the job's clock.
func (j *Job) Handle(ev market.Event) error {
	switch ev.Kind {
	case market.Ready:
		r, err := j.cal.Rate(ev.Machine.Market.Type)
		if err != nil {
			return fmt.Errorf("machine %d: %w", ev.Machine.ID, err)
		}
		// A machine up before the job's own start has ended is one of
		// its formation: the start covers its join.
		from := ev.At.Add(seconds(j.cal.JoinSeconds))
		if !ev.At.After(j.started) {
			from = j.started
		}
		j.members[ev.Machine.ID] = &member{class: ev.Machine.Class, rate: r, workFrom: from}
		if !from.After(j.now) {
			j.replanJoined(ev.Machine.Class == market.Transient)
			return nil
		}
	case market.Notice:
		m := j.members[ev.Machine.ID]
		if m == nil || j.mode == Flat {
			return nil // a flat job does not drain: it learns of the loss when the machine is gone
		}
		m.leaveAt = ev.Deadline.Add(-seconds(j.cal.DrainSeconds))
		switch {
		case !m.leaveAt.Before(j.now):
		case j.mode == Elastic:
			// Too short to drain: it stops now and is lost when it goes.
			m.leaveAt, m.undrained = j.now, true
		default:
			// The notice is shorter than the drain: the machine is lost
			// as if revoked without one.
			j.loseUnstreamed(m)
			m.leaveAt = j.now
			j.revoke(m)
		}
	case market.Gone:
		m := j.members[ev.Machine.ID]
		if m == nil {
			return nil
		}
		delete(j.members, ev.Machine.ID)
		switch {
		case j.mode == Flat && ev.By == market.ByProvider:
			j.crash()
		case j.mode == Elastic:
			j.goneElastic(ev, m)
		case j.mode == Tiered && ev.By == market.ByProvider && (m.leaveAt.IsZero() || ev.At.Before(m.leaveAt)):
			j.loseUnstreamed(m)
			j.revoke(m)
		}
	}
	j.replan()
	return nil
}

// loseUnstreamed counts one sync interval of a machine's share of the
// updates: what its ActivePS had acknowledged but not streamed.
func (j *Job) loseUnstreamed(m *member) {
	if rate := j.rate(); rate > 0 {
		j.Lost += rate * seconds(j.cal.SyncIntervalSeconds).Hours() * m.rate / j.workerRate()
	}
}

// revoke applies a revocation without enough notice of a working
// machine, as the coordinator does (docs/design/tiers.md, "Bulk
// revocation"): the job stops until the failure timeout has declared the
// machine dead and its data partitions went back to the pool; a tiered
// job that has lost k ActivePS (transient machines in stage 2 or 3) since
// its last switch falls back to stage 1 at once, and stays there until a
// transient machine joins. Machines lost in the same instant share one
// timeout.
func (j *Job) revoke(m *member) {
	if m.workFrom.After(j.now) {
		return // still booting or joining: it held no work
	}
	j.Revocations++
	j.pausedUntil = later(j.pausedUntil, j.now.Add(j.cal.Revocation()))
	if m.class != market.Transient || j.stage < 2 {
		return
	}
	j.revoked++
	if j.revoked >= j.cal.K() || j.working().Transient == 0 {
		j.Switches = append(j.Switches, Switch{At: j.now, From: j.stage, To: 1})
		j.stage, j.revoked, j.fellBack = 1, 0, true
	}
}

// goneElastic applies machine m's departure from an elastic job. A
// machine that drained (its notice, or a release, came at least a drain
// before it went) handed its slots over, unless no other machine was on
// the ring to take them: the last server cannot drain. One lost without
// a drain costs the failure timeout; its chains' other copies keep its
// slots unless it was the last machine or the k-th lost in the same
// instant (chains of k).
func (j *Job) goneElastic(ev market.Event, m *member) {
	if m.workFrom.After(j.now) {
		return // still booting or joining: it held nothing
	}
	alone := j.onRing() == 0
	if drained := !m.undrained && (!m.leaveAt.IsZero() && !ev.At.Before(m.leaveAt) || ev.By != market.ByProvider); drained {
		if alone && j.finished.IsZero() {
			j.crash()
		}
		return
	}
	j.Revocations++
	if !ev.At.Equal(j.revokedAt) {
		j.revokedAt, j.revoked = ev.At, 0
	}
	j.revoked++
	j.pausedUntil = later(j.pausedUntil, j.now.Add(j.cal.Revocation()))
	if alone || j.revoked >= j.cal.K() {
		j.crash()
	}
}

// onRing counts the machines that hold slots at the job's clock: joined
// and not yet drained away.
func (j *Job) onRing() int {
	m := j.working()
	return int(m.Reliable + m.Transient)
}

// writers is how many machines write a checkpoint (each its shard).
func (j *Job) writers() int {
	if j.mode == Flat {
		return j.need
	}
	return max(1, j.onRing())
}

func (j *Job) crash() {
	j.Lost += j.done - j.ckpt
	j.done = j.ckpt
	j.ckptEnd, j.ckptNext = time.Time{}, 0
	j.restart = true
}

// working returns the mix of machines working at the job's clock.
func (j *Job) working() Mix {
	var m Mix
	for _, w := range j.members {
		if w.workFrom.After(j.now) || (!w.leaveAt.IsZero() && !j.now.Before(w.leaveAt)) {
			continue
		}
		if w.class == market.Reliable {
			m.Reliable++
			m.ReliableRate += w.rate
		} else {
			m.Transient++
			m.TransientRate += w.rate
		}
	}
	return m
}

func (j *Job) workerRate() float64 {
	m := j.working()
	return m.ReliableRate + m.TransientRate
}

// rate is the updates per hour at the job's clock.
func (j *Job) rate() float64 {
	if !j.finished.IsZero() || j.now.Before(j.pausedUntil) {
		return 0
	}
	m := j.working()
	if j.mode != Tiered {
		if m.Reliable+m.Transient < float64(j.need) || j.restart {
			return 0
		}
		return j.flow.Stage(0, m)
	}
	return j.flow.Stage(j.stage, m)
}

// replan takes the best stage (tiered) or restarts (flat) after the
// working set changed. After a fallback a tiered job stays in stage 1
// until a transient machine joins (joined).
func (j *Job) replan() { j.replanJoined(false) }

func (j *Job) replanJoined(joined bool) {
	if !j.finished.IsZero() {
		return // the machines given back after the end change no stage
	}
	m := j.working()
	if j.mode != Tiered {
		if j.restart && m.Reliable+m.Transient >= float64(j.need) {
			// A restart starts the job's processes again (its start)
			// and reads the checkpoint back.
			j.restart = false
			j.pausedUntil = later(j.pausedUntil, j.now.Add(seconds(j.cal.StartSeconds)+j.cal.Transfer(j.writers())))
		}
		return
	}
	if joined {
		j.fellBack = false
	}
	if j.fellBack {
		return
	}
	if t := j.cal.Stage; t > 0 {
		// A fixed target: the coordinator switches to it whenever it can
		// be formed, and to stage 1 when it cannot.
		to := 1
		if j.flow.Stage(t, m) > 0 {
			to = t
		}
		j.switchTo(to)
		return
	}
	best, rate := j.flow.Best(m)
	cur := j.flow.Stage(j.stage, m)
	if best != j.stage && (cur == 0 || rate > cur*(1+j.cal.Hysteresis)) {
		j.switchTo(best)
	}
}

// switchTo switches the tiered job to stage to, pausing it.
func (j *Job) switchTo(to int) {
	if to == j.stage {
		return
	}
	j.Switches = append(j.Switches, Switch{At: j.now, From: j.stage, To: to})
	j.stage, j.revoked = to, 0
	j.pausedUntil = later(j.pausedUntil, j.now.Add(seconds(j.cal.SwitchPauseSeconds)))
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
