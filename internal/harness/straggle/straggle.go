package straggle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/ps"
)

// ErrPattern: a --straggle pattern that does not parse.
var ErrPattern = errors.New("straggle: bad pattern")

// Kind is what a pattern slows.
type Kind int

// The kinds of pattern.
const (
	// None slows nothing.
	None Kind = iota
	// One slows one worker, picked by the seed, throughout.
	One
	// Random slows, in each clock, one worker picked by the seed and the
	// clock.
	Random
	// Machine slows one machine's worker, picked by the seed, between From
	// and To after training starts.
	Machine
	// PowerLaw multiplies every minibatch's time by a Pareto draw of index
	// Alpha and minimum 1, capped at PowerLawCap.
	PowerLaw
)

// PowerLawCap bounds a power-law factor: a draw of index 1.5 has infinite
// variance, and a single minibatch slowed a thousandfold would measure the
// draw, not the schedule.
const PowerLawCap = 20

// Pattern is a parsed --straggle value.
type Pattern struct {
	Kind Kind
	// Factor is how many times slower a slowed minibatch is (One, Random,
	// Machine).
	Factor float64
	// From and To bound Machine's disruption, from the start of training.
	From, To time.Duration
	// Alpha is PowerLaw's index.
	Alpha float64
}

// Parse reads one:4x, random:3x, machine:5x@2s-6s or powerlaw:1.5 (and ""
// or none for no stragglers).
func Parse(s string) (Pattern, error) {
	if s == "" || s == "none" {
		return Pattern{}, nil
	}
	kind, arg, ok := strings.Cut(s, ":")
	if !ok {
		return Pattern{}, fmt.Errorf("%w: %q: want KIND:ARG (one:4x, random:3x, machine:5x@2s-6s, powerlaw:1.5)", ErrPattern, s)
	}
	factor := func(v string) (float64, error) {
		f, err := strconv.ParseFloat(strings.TrimSuffix(v, "x"), 64)
		if err != nil || !strings.HasSuffix(v, "x") || !(f >= 1) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("%w: %q: the factor is a number of at least 1 followed by x, as 4x", ErrPattern, s)
		}
		return f, nil
	}
	switch kind {
	case "one", "random":
		f, err := factor(arg)
		if err != nil {
			return Pattern{}, err
		}
		k := One
		if kind == "random" {
			k = Random
		}
		return Pattern{Kind: k, Factor: f}, nil
	case "machine":
		fs, span, ok := strings.Cut(arg, "@")
		from, to, ok2 := strings.Cut(span, "-")
		if !ok || !ok2 {
			return Pattern{}, fmt.Errorf("%w: %q: want machine:FACTORx@FROM-TO, as machine:5x@2s-6s", ErrPattern, s)
		}
		f, err := factor(fs)
		if err != nil {
			return Pattern{}, err
		}
		a, err1 := time.ParseDuration(from)
		b, err2 := time.ParseDuration(to)
		if err1 != nil || err2 != nil || a < 0 || b <= a {
			return Pattern{}, fmt.Errorf("%w: %q: FROM-TO are durations with FROM < TO, as 2s-6s", ErrPattern, s)
		}
		return Pattern{Kind: Machine, Factor: f, From: a, To: b}, nil
	case "powerlaw":
		a, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(a > 0) || math.IsInf(a, 0) {
			return Pattern{}, fmt.Errorf("%w: %q: the index is a positive number, as powerlaw:1.5", ErrPattern, s)
		}
		return Pattern{Kind: PowerLaw, Alpha: a}, nil
	}
	return Pattern{}, fmt.Errorf("%w: %q: unknown kind %q (one, random, machine, powerlaw)", ErrPattern, s, kind)
}

// String is the pattern as Parse reads it.
func (p Pattern) String() string {
	f := strconv.FormatFloat(p.Factor, 'g', -1, 64) + "x"
	switch p.Kind {
	case One:
		return "one:" + f
	case Random:
		return "random:" + f
	case Machine:
		return fmt.Sprintf("machine:%s@%v-%v", f, p.From, p.To)
	case PowerLaw:
		return "powerlaw:" + strconv.FormatFloat(p.Alpha, 'g', -1, 64)
	}
	return "none"
}

// Victim is the worker that One and Machine slow among workers, from the
// seed.
func Victim(seed uint64, workers int) int {
	if workers <= 0 {
		return 0
	}
	return int(mix(seed, 0x7374726167676c65) % uint64(workers))
}

// Slowdown is how many times slower the minibatch of worker rank (of
// workers) at clock, its n-th minibatch, begun at since after training
// started, is under p with seed. It is a pure function: a run replays
// from its seed.
func (p Pattern) Slowdown(seed uint64, rank, workers int, clock int64, n int64, since time.Duration) float64 {
	switch p.Kind {
	case One:
		if rank == Victim(seed, workers) {
			return p.Factor
		}
	case Random:
		if workers > 0 && int(mix(seed, uint64(clock))%uint64(workers)) == rank {
			return p.Factor
		}
	case Machine:
		if rank == Victim(seed, workers) && since >= p.From && since < p.To {
			return p.Factor
		}
	case PowerLaw:
		// Inverse transform: U uniform in (0, 1], f = U^(-1/alpha).
		u := (float64(mix(mix(seed, uint64(rank)), uint64(n))>>11) + 1) / (1 << 53)
		return min(math.Pow(u, -1/p.Alpha), PowerLawCap)
	}
	return 1
}

// mix is splitmix64's finaliser over a and b: a deterministic hash.
func mix(a, b uint64) uint64 {
	z := a ^ (b+0x9e3779b97f4a7c15)*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Pacer slows one worker's minibatches by the pattern. With emulated
// compute (WithWork: w a row), a minibatch of n rows holds f·w·n, f the
// minibatch's Slowdown: only the worker's own work is slowed. Without,
// a step that took d is held (f − 1)·d more. (Slowing the whole time
// from one boundary to the next, as a first version did, also slowed the
// time a worker spent waiting for the others under BSP, and the delays
// compounded: 85 times the ideal for random:3x under BSP.)
type Pacer struct {
	p       Pattern
	seed    uint64
	c       *ps.Client
	workers int
	start   time.Time
	// The loop calls Pace from one goroutine.
	n      int64 // minibatches paced
	slowed time.Duration
	// work is the emulated compute per row (WithWork).
	work time.Duration
}

// WithWork makes every row of a minibatch cost w more, as emulated
// compute that is slowed with the rest (f·w a row). On a machine whose
// cores the workers share, a slowed worker's wait frees a core for the
// others, which a slowed machine of its own would not; emulated compute
// takes no core, so that workers behave as if each had its own machine
// (docs/design/stragglers.md).
func (pc *Pacer) WithWork(w time.Duration) *Pacer {
	pc.work = w
	return pc
}

// NewPacer returns the pacer of worker c under p, training from start.
func NewPacer(p Pattern, seed uint64, c *ps.Client, start time.Time) *Pacer {
	w := 0
	if l := c.Layout(); l != nil {
		w = l.Workers
	}
	return &Pacer{p: p, seed: seed, c: c, workers: w, start: start}
}

// Pace implements ps.Pacer.
func (pc *Pacer) Pace(ctx context.Context, b ps.Batch, took time.Duration) error {
	f := pc.p.Slowdown(pc.seed, pc.c.Rank(), pc.workers, pc.c.Clock(), pc.n, time.Since(pc.start)-took)
	pc.n++
	d := time.Duration(float64(took) * (f - 1))
	if pc.work > 0 {
		d = time.Duration(f * float64(pc.work) * float64(len(b.Rows)))
	}
	if d <= 0 {
		return nil
	}
	pc.slowed += d
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Slowed is how long the pacer held its worker.
func (pc *Pacer) Slowed() time.Duration { return pc.slowed }
