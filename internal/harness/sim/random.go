package sim

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/internal/control/coord"
)

// faultsUntil is when a random schedule's faults stop.
const faultsUntil = 8 * time.Second

func ms(r *rand.Rand, lo, hi int) time.Duration {
	return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond
}

// Random draws a scenario from seed, all of it before anything runs: 3
// servers with k = 2, 2 or 3 workers running Counters (SSP staleness 0–3,
// 6–15 keys a step), and faults from 0.2–0.8 s until 8 s, each 0.3–1.5 s
// after the previous one ended: a server kill (22 %), a server join
// (18 %), a worker kill with its replacement 0–1.5 s later (12 %), a
// partition of 50 ms–2 s (22 %), a latency spike of +5–200 ms for
// 0.1–2 s (12 %), a reset connection (14 %). One join in three is followed
// 1–100 ms later by a kill, which lands just before or just after the
// joiner's promotion. A kill hits only a server whose death leaves a copy
// of every slot (KillServer.KeepCopies): k = 2 copies survive one failure
// at a time, and a failure is repaired within milliseconds of its
// detection. Its invariants are ExactlyOnce and Staleness.
func Random(seed uint64) Scenario {
	r := rand.New(rand.NewPCG(seed, 0x5117))
	cfg := Config{Seed: seed, Workers: 2 + r.IntN(2)}
	w := Counters{Staleness: r.IntN(4)}
	w.KeysPerStep = 6 + r.IntN(10)
	var s Schedule
	for at := ms(r, 200, 800); at < faultsUntil; {
		pick := r.Uint64()
		if n := len(s); n > 0 {
			if j, ok := s[n-1].Fault.(JoinServer); ok && j.ElseKill && r.IntN(3) == 0 {
				t := s[n-1].At + ms(r, 1, 100)
				s = append(s, Timed{t, KillServer{Target: Target{Pick: pick}, KeepCopies: true}})
				at = t + ms(r, 300, 1500)
				continue
			}
		}
		var f Fault
		var lasts time.Duration
		switch x := r.IntN(100); {
		case x < 22:
			f = KillServer{Target: Target{Pick: pick}, KeepCopies: true}
		case x < 40:
			f = JoinServer{ElseKill: true, Pick: pick}
		case x < 52:
			f = KillWorker{Target: Target{Pick: pick}, Replace: ms(r, 0, 1500)}
		case x < 74:
			lasts = ms(r, 50, 2000)
			f = Partition{Link: Link{Pick: pick}, For: lasts}
		case x < 86:
			lasts = ms(r, 100, 2000)
			f = Delay{Link: Link{Pick: pick}, For: lasts, Extra: ms(r, 5, 200)}
		default:
			f = Drop{Pick: pick}
		}
		s = append(s, Timed{at, f})
		at += ms(r, 300, 1500) + lasts
	}
	return Scenario{Config: cfg, Workload: w, Faults: s, Invariants: []Invariant{ExactlyOnce{}, Staleness{}}}
}

// Describe is a one-line account of a scenario of Counters.
func (sc Scenario) Describe() string {
	cfg := sc.Config.withDefaults()
	s := fmt.Sprintf("%d servers (k = %d), %d workers", cfg.Servers, cfg.Replication, cfg.Workers)
	if w, ok := sc.Workload.(Counters); ok {
		cons := fmt.Sprintf("SSP staleness %d", w.Staleness)
		if w.BSP {
			cons = "BSP"
		}
		s += fmt.Sprintf(", %s, %d keys a step", cons, w.withDefaults().KeysPerStep)
	}
	return s + "; faults: " + sc.Faults.String()
}

// RandomDrains is Random(seed) with planned departures and stragglers:
// of its faults, drawn from the seed again, one in six becomes an
// eviction notice to a server (30 s of grace; skipped while k or fewer
// servers are on the ring), one in six a notice to a worker, replaced
// within a second, and one in six a worker computing ten times slower for
// a second.
func RandomDrains(seed uint64) Scenario {
	sc := Random(seed)
	r := rand.New(rand.NewPCG(seed, 0xd7a1))
	for i := range sc.Faults {
		switch r.IntN(6) {
		case 0:
			sc.Faults[i].Fault = Drain{Target: Target{Pick: r.Uint64()}, Role: RoleServer, Grace: 30 * time.Second}
		case 1:
			sc.Faults[i].Fault = Drain{Target: Target{Pick: r.Uint64()}, Role: RoleWorker, Grace: 30 * time.Second, Replace: ms(r, 0, 1000)}
		case 2:
			sc.Faults[i].Fault = SlowWorker{Target: Target{Pick: r.Uint64()}, Factor: 10, For: time.Second}
		}
	}
	return sc
}

// RandomStragglers is RandomDrains(seed) with rapid reassignment on
// (Counters.Reassign): idle workers take the tails of slow peers'
// pieces, through drains, deaths and slow workers, and the invariants
// check that every row is still trained once by the state's account.
func RandomStragglers(seed uint64) Scenario {
	sc := RandomDrains(seed)
	if w, ok := sc.Workload.(Counters); ok {
		w.Reassign = true
		sc.Workload = w
	}
	return sc
}

// RandomRewind is Random(seed) run with a checkpoint every pass and the
// coordinator's --on-copies-lost resume, its job (Counters, 4 passes)
// keeping no partition state (a job with some never goes back): of its
// faults, drawn from the seed again, one in four server kills becomes a
// kill of k servers at once (KillServers), which loses every copy of
// some slots, followed 0.5–2 s later by a join, and one in three of the
// other kills may take the last copy of slots being rebuilt (no
// KeepCopies; KeepOne: never the last server alive). The invariants check the final model and the reads
// through the rewinds, and that no rewind is needless
// (KindNeedlessRewind).
func RandomRewind(seed uint64) Scenario {
	sc := Random(seed)
	r := rand.New(rand.NewPCG(seed, 0x4e77))
	sc.CheckpointEvery, sc.OnCopiesLost = 1, coord.OnCopiesLostResume
	if w, ok := sc.Workload.(Counters); ok {
		w.NoState, w.Passes = true, 4
		sc.Workload = w
	}
	var s Schedule
	for _, f := range sc.Faults {
		k, ok := f.Fault.(KillServer)
		switch x := r.IntN(12); {
		case !ok:
		case x < 3:
			f.Fault = KillServers{N: sc.withDefaults().Replication, Pick: k.Pick}
			s = append(s, f)
			f = Timed{f.At + ms(r, 500, 2000), JoinServer{}}
		case x < 6:
			k.KeepCopies, k.KeepOne = false, true
			f.Fault = k
		}
		s = append(s, f)
	}
	slices.SortStableFunc(s, func(a, b Timed) int { return cmp.Compare(a.At, b.At) })
	sc.Faults = s
	return sc
}

// KillServers kills N servers at once (a SIGKILL of each in the same
// instant), drawn from Pick among those alive, when more than N are
// alive; otherwise a server joins.
type KillServers struct {
	N    int
	Pick uint64
}

func (f KillServers) String() string { return fmt.Sprintf("kill %d servers at once", f.N) }

func (f KillServers) Apply(ctx context.Context, c *Cluster) {
	alive := ids(c.Alive(RoleServer))
	if len(alive) <= f.N {
		c.Note("no kill of %d servers: %d alive; a server joins instead", f.N, len(alive))
		JoinServer{}.Apply(ctx, c)
		return
	}
	r := rand.New(rand.NewPCG(f.Pick, 0))
	r.Shuffle(len(alive), func(i, j int) { alive[i], alive[j] = alive[j], alive[i] })
	for _, id := range alive[:f.N] {
		c.KillServer(id)
	}
}
