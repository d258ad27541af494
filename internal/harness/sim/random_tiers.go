package sim

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// Tiers' classes of node in RandomTiers: servers 0 and 1 on reliable
// machines (the BackupPS of stages 2 and 3), every later server on a
// transient one; one worker in three on a reliable machine.
func tiersServerClass(i int) string {
	if i < 2 {
		return "reliable"
	}
	return "transient"
}

func tiersWorkerClass(i int) string {
	if i%3 == 0 {
		return "reliable"
	}
	return "transient"
}

// RandomTiers draws a scenario of tiers of reliability (issue 11) from
// seed: 2 reliable and 2–3 transient servers with k = 2, starting in stage
// 1, 2 or 3 with a sync interval of 100–500 ms; 2 or 3 workers running
// Counters (one in three on a reliable machine), every push one key
// (Counters.HotOnly) in half the schedules, so that the ledgers' count of
// lost pushes can be compared worker by worker. Faults from 0.2–0.8 s
// until 8 s, each 0.3–1.5 s after the previous one ended: a stage switch
// to another stage (20 %), a revocation of every transient machine without
// notice (10 %) or with one (10 %: 2–5 s, or in one case in two 10–300 ms,
// shorter than a flush), workers replaced 0–1.5 s later, a bulk addition
// of 1–3 transient machines, each a server and in one case in two a
// worker (12 %; after a revocation, one in two is followed 1–3 s later by
// such an addition), and the faults of Random: a server kill that leaves
// a copy of every slot (10 %), a server's drain (6 %), a worker kill
// (8 %) or drain (4 %), a partition (8 %), a latency spike (6 %), a reset
// connection (6 %). Its invariants are ExactlyOnce, Staleness and
// LedgerCounts; a revocation with a notice of NoticeEnough or more checks
// that no ActivePS was left to kill.
func RandomTiers(seed uint64) Scenario {
	r := rand.New(rand.NewPCG(seed, 0x7135))
	cfg := Config{Seed: seed, Servers: 4 + r.IntN(2), Workers: 2 + r.IntN(2), MaxServers: 8,
		ServerClass: tiersServerClass, WorkerClass: tiersWorkerClass,
		Stage: tier.Stage(1 + r.IntN(3)), SyncInterval: ms(r, 100, 500)}
	w := Counters{Staleness: r.IntN(4), KeysPerStep: 6 + r.IntN(10), HotOnly: r.IntN(2) == 0}
	var s Schedule
	for at := ms(r, 200, 800); at < faultsUntil; {
		pick := r.Uint64()
		var f Fault
		var lasts time.Duration
		switch x := r.IntN(100); {
		case x < 20:
			f = SwitchStage{To: tier.Stage(1 + r.IntN(3))}
		case x < 30:
			f = Revoke{Class: "transient", Replace: ms(r, 0, 1500)}
		case x < 40:
			notice := ms(r, 2000, 5000)
			if r.IntN(2) == 0 {
				notice = ms(r, 10, 300)
			}
			f = Revoke{Class: "transient", Notice: notice, Replace: ms(r, 0, 1500)}
			lasts = notice
		case x < 52:
			f = AddMachines{Class: "transient", N: 1 + r.IntN(3), Workers: r.IntN(2) == 0}
		case x < 62:
			f = KillServer{Target: Target{Pick: pick}, KeepCopies: true}
		case x < 68:
			f = Drain{Target: Target{Pick: pick}, Role: RoleServer, Grace: 30 * time.Second}
		case x < 76:
			f = KillWorker{Target: Target{Pick: pick}, Replace: ms(r, 0, 1500)}
		case x < 80:
			f = Drain{Target: Target{Pick: pick}, Role: RoleWorker, Grace: 30 * time.Second, Replace: ms(r, 0, 1000)}
		case x < 88:
			lasts = ms(r, 50, 2000)
			f = Partition{Link: Link{Pick: pick}, For: lasts}
		case x < 94:
			lasts = ms(r, 100, 2000)
			f = Delay{Link: Link{Pick: pick}, For: lasts, Extra: ms(r, 5, 200)}
		default:
			f = Drop{Pick: pick}
		}
		s = append(s, Timed{at, f})
		if _, ok := f.(Revoke); ok && r.IntN(2) == 0 {
			// The market gives the machines back.
			at += lasts + ms(r, 1000, 3000)
			s = append(s, Timed{at, AddMachines{Class: "transient", N: 1 + r.IntN(3), Workers: r.IntN(2) == 0}})
			lasts = 0
		}
		at += ms(r, 300, 1500) + lasts
	}
	return Scenario{Config: cfg, Workload: w, Faults: s, Invariants: []Invariant{ExactlyOnce{}, Staleness{}, LedgerCounts{}}}
}

// RandomBackups draws RandomTiers(seed)'s scenario and adds the loss of
// every reliable server at once, at a random time within the faults'
// span (without notice, or in one case in two with a notice of 0.5–3 s),
// when they are the BackupPS (LoseBackups), and one or two reliable
// machines added 0.5–3 s after it ends, with no revocation of the
// transient machines from 2 s before the loss to 2 s after the addition:
// the cluster leaves the tiers when
// its last BackupPS goes, and goes back into them once a reliable server
// is on the ring again (docs/design/tiers.md, "Back into the tiers").
func RandomBackups(seed uint64) Scenario {
	sc := RandomTiers(seed)
	r := rand.New(rand.NewPCG(seed, 0xbac4))
	at := ms(r, 500, int(faultsUntil/time.Millisecond))
	lose := LoseBackups{}
	ends := at
	if r.IntN(2) == 0 {
		lose.Notice = ms(r, 500, 3000)
		ends += lose.Notice
	}
	back := AddMachines{Class: "reliable", N: 1 + r.IntN(2)}
	backAt := ends + ms(r, 500, 3000)
	// Out of the tiers nothing reliable holds the model: a revocation of
	// every transient machine then loses all of it, which no design
	// survives. None is drawn from 2 s before the loss (a fallback the
	// revocation starts would make the BackupPS the ring) until 2 s after
	// the reliable machines come back (the way back takes two handoffs).
	faults := slices.DeleteFunc(slices.Clone(sc.Faults), func(t Timed) bool {
		_, revoke := t.Fault.(Revoke)
		return revoke && t.At >= at-2*time.Second && t.At < backAt+2*time.Second
	})
	faults = append(faults, Timed{at, lose}, Timed{backAt, back})
	slices.SortStableFunc(faults, func(a, b Timed) int { return cmp.Compare(a.At, b.At) })
	sc.Faults = faults
	return sc
}

// LoseBackups takes every reliable server at once, as Revoke does, when
// they are the BackupPS: the cluster runs stage 2 or 3 with no switch in
// progress. Otherwise (stage 1, where they are the ring and every slot
// would lose every copy, or a switch under way) it is skipped.
type LoseBackups struct{ Notice time.Duration }

func (f LoseBackups) String() string {
	return fmt.Sprintf("lose every BackupPS with %v notice", f.Notice)
}

func (f LoseBackups) Apply(ctx context.Context, c *Cluster) {
	if l := c.Layout(); l.CurrentStage() < tier.Stage2 || l.Switch != nil || len(l.Backup) == 0 {
		c.Note("skip %v: stage %d, switch %v", f, l.CurrentStage(), l.Switch != nil)
		return
	}
	Revoke{Class: "reliable", Notice: f.Notice, Replace: -1, ServersOnly: true}.Apply(ctx, c)
}

// AddMachines adds N machines of Class at once, as a spot market grants
// them: each a server, which joins the running cluster (on standby, as a
// new ActivePS or as a BackupPS-to-be, as the stage has it), and, with
// Workers, a worker too. Servers stop at MaxServers alive.
type AddMachines struct {
	Class   string
	N       int
	Workers bool
}

func (f AddMachines) String() string {
	what := "servers"
	if f.Workers {
		what = "servers and workers"
	}
	return fmt.Sprintf("add %d %s machines (%s)", f.N, f.Class, what)
}

func (f AddMachines) Apply(ctx context.Context, c *Cluster) {
	n := min(f.N, c.cfg.MaxServers-len(c.Alive(RoleServer)))
	if n <= 0 {
		c.Note("skip %v: %d servers alive", f, len(c.Alive(RoleServer)))
		return
	}
	c.Note("FAULT add %d %s machines", n, f.Class)
	jctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for range n {
		if f.Workers {
			c.StartWorker(f.Class)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.StartServer(jctx, f.Class); err != nil && ctx.Err() == nil {
				c.Violate(KindBroken, "a new %s server did not join: %v", f.Class, err)
			}
		}()
	}
	wg.Wait()
}
