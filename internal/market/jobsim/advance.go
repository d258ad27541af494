package jobsim

import (
	"time"

	"github.com/terrace-ml/terrace/internal/market"
)

// Next is the job's next change of rate (a machine starting or stopping
// work, a pause ending, a checkpoint completing) or its completion; zero
// if none is coming.
func (j *Job) Next() time.Time {
	if !j.finished.IsZero() {
		return time.Time{}
	}
	var next time.Time
	consider := func(t time.Time) {
		if t.After(j.now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	consider(j.pausedUntil)
	consider(j.ckptEnd)
	for _, m := range j.members {
		consider(m.workFrom)
		consider(m.leaveAt)
	}
	if r := j.rate(); r > 0 {
		consider(j.now.Add(time.Duration((j.total - j.done) / r * float64(time.Hour))).Add(time.Nanosecond))
		if j.ckptNext > 0 {
			consider(j.now.Add(time.Duration((j.ckptNext - j.done) / r * float64(time.Hour))).Add(time.Nanosecond))
		}
	}
	return next
}

// AdvanceTo runs the job until t, through every change of rate on the way.
func (j *Job) AdvanceTo(t time.Time) {
	for j.finished.IsZero() && j.now.Before(t) {
		step := t
		if n := j.Next(); !n.IsZero() && n.Before(step) {
			step = n
		}
		r := j.rate()
		if r > 0 {
			left := (j.total - j.done) / r * float64(time.Hour)
			if float64(step.Sub(j.now)) >= left {
				j.now = j.now.Add(time.Duration(left))
				j.done = j.total
				j.finished = j.now
				return
			}
			j.done += r * step.Sub(j.now).Hours()
		}
		before := j.working()
		j.now = step
		if !j.ckptEnd.IsZero() && !j.now.Before(j.ckptEnd) {
			j.ckpt, j.ckptAt, j.ckptEnd = j.ckptValue, j.ckptEnd, time.Time{}
		}
		if j.ckptNext > 0 && j.done >= j.ckptNext*(1-passSlack) {
			// The pass boundary: the checkpoint asked for is taken.
			j.done, j.ckptNext = max(j.done, j.ckptNext), 0
			j.save()
		}
		if j.working() != before {
			j.replanJoined(j.joinedNow())
		}
	}
}

// joinedNow says a transient machine starts work at the job's clock.
func (j *Job) joinedNow() bool {
	for _, m := range j.members {
		if m.class == market.Transient && m.workFrom.Equal(j.now) {
			return true
		}
	}
	return false
}
