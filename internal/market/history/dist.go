package history

import (
	"math"
	"time"
)

// Bins is how many equal bins a Risk splits its horizon into: one a
// minute over an hour, finer than any setup, drain or notice time it is
// read against.
const Bins = 60

// Risk is the distribution, estimated from the past, of the time T from
// a decision to a machine's eviction notice, over one horizon: how likely
// a notice is in each bin of the horizon, and the mean T there. A policy
// reads from it what it needs (the chance that the billing period ends in
// an eviction, the working time once setup and drain are deducted), so
// that the estimator does not depend on the job's calibration.
type Risk struct {
	// Horizon is the span the distribution covers; Samples how many past
	// windows it rests on (0: none, the Risk says nothing).
	Horizon time.Duration
	Samples int
	bin     [Bins]bin
}

// bin is the probability of a notice within one bin, and the mean time
// to it (seconds) given that it falls there.
type bin struct{ p, mean float64 }

func (r *Risk) width() float64 { return r.Horizon.Seconds() / Bins }

// Evicted is P(a notice within the horizon).
func (r Risk) Evicted() float64 {
	var p float64
	for _, b := range r.bin {
		p += b.p
	}
	return min(p, 1) // not above 1 by rounding
}

// Before is P(T < t): the notice comes before t (linear within a bin).
func (r Risk) Before(t time.Duration) float64 {
	w := r.width()
	if w <= 0 || t <= 0 {
		return 0
	}
	var p float64
	for i, b := range r.bin {
		lo := float64(i) * w
		switch s := t.Seconds(); {
		case s >= lo+w:
			p += b.p
		case s > lo:
			p += b.p * (s - lo) / w
		}
	}
	return min(p, 1) // not above 1 by rounding
}

// Clamped is E[clamp(T − a, 0, l)], with no notice within the horizon
// counting l: the expected time a machine spends at something (working,
// being billed) that starts a after the decision, ends with the notice
// (shifted by a), and lasts at most l. Within a bin the clamp is linear,
// so its value at the bin's mean is exact, except in the one or two bins
// that straddle a kink, where it is the nearest linear reading.
func (r Risk) Clamped(a, l time.Duration) time.Duration {
	if l <= 0 {
		return 0
	}
	as, ls := a.Seconds(), l.Seconds()
	never := 1.0
	var e float64
	for _, b := range r.bin {
		never -= b.p
		e += b.p * min(max(b.mean-as, 0), ls)
	}
	return time.Duration((e + max(never, 0)*ls) * float64(time.Second))
}

// mix is (1−f)·r + f·s, bin by bin.
func mix(r, s Risk, f float64) Risk {
	out := Risk{Horizon: r.Horizon, Samples: min(r.Samples, s.Samples)}
	for i := range out.bin {
		p := (1-f)*r.bin[i].p + f*s.bin[i].p
		out.bin[i].p = p
		if p > 0 {
			out.bin[i].mean = ((1-f)*r.bin[i].p*r.bin[i].mean + f*s.bin[i].p*s.bin[i].mean) / p
		}
	}
	return out
}

// exponential is the Risk of a Poisson eviction process of rate lambda
// (per second) over horizon h.
func exponential(lambda float64, h time.Duration, samples int) Risk {
	r := Risk{Horizon: h, Samples: samples}
	w := r.width()
	for i := range r.bin {
		lo, hi := float64(i)*w, float64(i+1)*w
		elo, ehi := math.Exp(-lambda*lo), math.Exp(-lambda*hi)
		p := elo - ehi
		r.bin[i].p = p
		if p > 0 {
			// E[T | lo ≤ T < hi] of an exponential.
			r.bin[i].mean = ((lo+1/lambda)*elo - (hi+1/lambda)*ehi) / p
		} else {
			r.bin[i].mean = (lo + hi) / 2
		}
	}
	return r
}
