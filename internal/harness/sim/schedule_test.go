package sim_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// The simulated job: every worker trains leased partitions of rows
// minibatches for epochs epochs; a minibatch reads its keys (and every
// rank's hot key) under SSP, computes for a while, pushes +1 to each key and
// ends its clock.
const (
	keySpace      = 1500
	partitions    = 6
	rows          = 30
	epochs        = 2
	progressEvery = 4
	servers       = 3
	maxServers    = 6
	// timeLimit bounds a schedule's training in fake time; faults stop
	// after faultsUntil.
	timeLimit   = 2 * time.Minute
	faultsUntil = 8 * time.Second
)

// params is one schedule, all drawn from its seed before anything runs.
type params struct {
	workers     int
	staleness   int
	keysPerStep int
	faults      []fault
}

type faultKind int

const (
	killServer faultKind = iota
	joinServer
	killWorker
	partition
	spike
	drop
)

var faultNames = [...]string{"kill server", "join server", "kill worker", "partition", "latency spike", "drop connection"}

func (k faultKind) String() string { return faultNames[k] }

// fault is one scheduled fault. Which node or link it hits is decided when
// it happens, from pick, among the nodes alive then.
type fault struct {
	at   time.Duration // after the workers start
	kind faultKind
	pick uint64
	// dur is how long a partition or spike lasts, or how long a killed
	// worker's replacement takes to start.
	dur   time.Duration
	extra time.Duration // a spike's added one-way delay
}

func (f fault) String() string {
	s := fmt.Sprintf("%v@%v", f.kind, f.at)
	switch f.kind {
	case partition:
		s += fmt.Sprintf(" for %v", f.dur)
	case spike:
		s += fmt.Sprintf(" +%v for %v", f.extra, f.dur)
	case killWorker:
		s += fmt.Sprintf(" (replacement after %v)", f.dur)
	}
	return s
}

func ms(r *rand.Rand, lo, hi int) time.Duration {
	return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond
}

// newParams draws a schedule. Faults come one at a time, the next at least
// 300 ms after the previous one ended, so that k = 2 copies are whole again
// before the next fault (a rebuild takes milliseconds of fake time; a
// failure is detected within a second) — except that one join in three is
// followed 1–100 ms later by a kill, which lands just before or just after
// the joiner's promotion (a kill waits for no join: before the promotion it
// becomes another join).
func newParams(seed uint64) params {
	r := rand.New(rand.NewPCG(seed, 0x5117))
	p := params{workers: 2 + r.IntN(2), staleness: r.IntN(4), keysPerStep: 6 + r.IntN(10)}
	for at := ms(r, 200, 800); at < faultsUntil; {
		f := fault{at: at, pick: r.Uint64()}
		if n := len(p.faults); n > 0 && p.faults[n-1].kind == joinServer && r.IntN(3) == 0 {
			f.at = p.faults[n-1].at + ms(r, 1, 100)
			f.kind = killServer
			p.faults = append(p.faults, f)
			at = f.at + ms(r, 300, 1500)
			continue
		}
		switch x := r.IntN(100); {
		case x < 22:
			f.kind = killServer
		case x < 40:
			f.kind = joinServer
		case x < 52:
			f.kind = killWorker
			f.dur = ms(r, 0, 1500)
		case x < 74:
			f.kind = partition
			f.dur = ms(r, 50, 2000)
		case x < 86:
			f.kind = spike
			f.dur = ms(r, 100, 2000)
			f.extra = ms(r, 5, 200)
		default:
			f.kind = drop
		}
		p.faults = append(p.faults, f)
		at += ms(r, 300, 1500)
		if f.kind == partition || f.kind == spike {
			at += f.dur
		}
	}
	return p
}

func (p params) String() string {
	fs := make([]string, len(p.faults))
	for i, f := range p.faults {
		fs[i] = f.String()
	}
	return fmt.Sprintf("%d servers (k = 2), %d workers, SSP staleness %d, %d keys a step; faults: %s",
		servers, p.workers, p.staleness, p.keysPerStep, strings.Join(fs, ", "))
}
