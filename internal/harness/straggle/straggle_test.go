package straggle

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	good := map[string]Pattern{
		"":                 {},
		"one:4x":           {Kind: One, Factor: 4},
		"random:3x":        {Kind: Random, Factor: 3},
		"machine:5x@2s-6s": {Kind: Machine, Factor: 5, From: 2 * time.Second, To: 6 * time.Second},
		"powerlaw:1.5":     {Kind: PowerLaw, Alpha: 1.5},
	}
	for s, want := range good {
		got, err := Parse(s)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", s, got, err, want)
		}
		if s != "" {
			if again, _ := Parse(got.String()); again != got {
				t.Errorf("Parse(%q.String() = %q) = %+v", s, got.String(), again)
			}
		}
	}
	for _, s := range []string{"one", "one:4", "one:0.5x", "one:x", "slow:4x", "machine:5x", "machine:5x@6s-2s", "machine:5x@2s", "powerlaw:0", "powerlaw:-1", "random:infx", "one:NaNx", "powerlaw:NaN"} {
		if _, err := Parse(s); !errors.Is(err, ErrPattern) {
			t.Errorf("Parse(%q): %v, want ErrPattern", s, err)
		}
	}
}

// A pattern replays from its seed, and slows what it says.
func TestSlowdown(t *testing.T) {
	one, _ := Parse("one:4x")
	v := Victim(7, 4)
	for r := range 4 {
		want := 1.0
		if r == v {
			want = 4
		}
		if f := one.Slowdown(7, r, 4, 10, 3, 0); f != want {
			t.Errorf("one:4x rank %d: %g, want %g", r, f, want)
		}
	}
	random, _ := Parse("random:3x")
	for clock := range int64(100) {
		slow := 0
		for r := range 4 {
			if random.Slowdown(7, r, 4, clock, 0, 0) == 3 {
				slow++
			}
		}
		if slow != 1 {
			t.Fatalf("random:3x clock %d: %d slow workers, want 1", clock, slow)
		}
	}
	m, _ := Parse("machine:5x@2s-6s")
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{{time.Second, 1}, {2 * time.Second, 5}, {5 * time.Second, 5}, {6 * time.Second, 1}} {
		if f := m.Slowdown(7, v, 4, 0, 0, c.at); f != c.want {
			t.Errorf("machine at %v: %g, want %g", c.at, f, c.want)
		}
	}
	// The capped Pareto law's mean, 1 + (1 - 20^-0.5)/0.5 = 2.553: the
	// bound docs/design/stragglers.md gives for powerlaw:1.5.
	pl, _ := Parse("powerlaw:1.5")
	sum, n := 0.0, 200000
	for i := range n {
		f := pl.Slowdown(7, i%4, 4, 0, int64(i/4), 0)
		if f < 1 || f > PowerLawCap {
			t.Fatalf("factor %g out of [1, %d]", f, PowerLawCap)
		}
		if g := pl.Slowdown(7, i%4, 4, 99, int64(i/4), time.Hour); g != f {
			t.Fatalf("draw %d not a function of seed, rank and minibatch: %g then %g", i, f, g)
		}
		sum += f
	}
	if mean, want := sum/float64(n), 1+(1-math.Pow(PowerLawCap, -0.5))/0.5; math.Abs(mean-want) > 0.03 {
		t.Errorf("powerlaw:1.5 mean %.3f, want %.3f", mean, want)
	}
}

// The bounds of docs/design/stragglers.md.
func TestBound(t *testing.T) {
	for _, c := range []struct {
		pattern string
		ideal   time.Duration
		want    float64
	}{
		{"one:4x", 0, 4 / 3.25},
		{"random:3x", 0, 1.5},
		{"machine:5x@2s-6s", time.Second, 1},
		{"machine:5x@2s-6s", 10 * time.Second, 1.08},        // the whole window: 0.8 s more
		{"machine:5x@2s-6s", 2500 * time.Millisecond, 1.05}, // T = 2.5 + 0.2 (T - 2) = 2.625
		{"powerlaw:1.5", 0, 1 + (1-math.Pow(PowerLawCap, -0.5))/0.5},
	} {
		p, _ := Parse(c.pattern)
		if got := Bound(p, 4, c.ideal); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Bound(%s, 4 workers, ideal %v) = %.6f, want %.6f", c.pattern, c.ideal, got, c.want)
		}
	}
}
