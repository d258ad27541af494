package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/harness/drill"
)

// chaosDrill is one random fault schedule against real processes.
type chaosDrill struct {
	app                           string
	servers, workers, coordinator int
	passes                        int
	kill, evict                   []string // role@time
}

// newChaosDrill draws drill seed's schedule: lr (a9a) or lda (KOS), both
// shipped and read by default from the repository's root; 3 or 4 servers (k = 2), 2 or 3 workers, 1 or 3 coordinators;
// one to four faults (SIGKILL or an eviction notice) at random times in
// the first 11 s of training, which the passes drawn outlast on a quiet
// host (a fault after the job's end is not injected, and the log says
// how many were). A schedule keeps a complete copy of
// every key: server faults come at least 4 s apart (a failure timeout
// and a rebuild of these small models take well under that) and leave
// two servers; a worker is left, and a coordinator is killed at most
// once, only with three.
func newChaosDrill(seed uint64) chaosDrill {
	r := rand.New(rand.NewPCG(seed, 0x7e77ace))
	d := chaosDrill{app: []string{"lr", "lr", "lda"}[r.IntN(3)], servers: 3 + r.IntN(2), workers: 2 + r.IntN(2), coordinator: []int{1, 3}[r.IntN(2)]}
	span := 10.0
	if d.app == "lr" {
		d.passes = 80 + r.IntN(40)
	} else {
		d.passes = 60 + r.IntN(30)
	}
	serversLeft, workersLeft, lastServer, coordKilled := d.servers, d.workers, -10.0, false
	for range 1 + r.IntN(4) {
		kill := r.IntN(3) < 2
		roles := []string{"server", "worker"}
		if kill && d.coordinator == 3 && !coordKilled {
			roles = append(roles, "coordinator")
		}
		role, at := roles[r.IntN(len(roles))], 1+span*r.Float64()
		switch role {
		case "server":
			if serversLeft <= 2 || at-lastServer < 4 && lastServer-at < 4 {
				continue
			}
			serversLeft, lastServer = serversLeft-1, at
		case "worker":
			if workersLeft <= 1 {
				continue
			}
			workersLeft--
		case "coordinator":
			coordKilled = true
		}
		ev := fmt.Sprintf("%s@%.1fs", role, at)
		if kill {
			d.kill = append(d.kill, ev)
		} else {
			d.evict = append(d.evict, ev)
		}
	}
	return d
}

func (d chaosDrill) args() []string {
	a := []string{"train", "--processes", "--app", d.app, "--servers", strconv.Itoa(d.servers), "--workers", strconv.Itoa(d.workers),
		"--coordinators", strconv.Itoa(d.coordinator), "--passes", strconv.Itoa(d.passes), "--timeout", "4m"}
	if len(d.kill) > 0 {
		a = append(a, "--kill", strings.Join(d.kill, ","))
	}
	if len(d.evict) > 0 {
		a = append(a, "--evict", strings.Join(d.evict, ","))
	}
	return a
}

// chaosSchedule is one random fault schedule against real processes.
type chaosSchedule interface {
	args() []string
	planned() int
	// check returns what is wrong with a drill's report.
	check(rep chaosReport) []string
}

// chaosReport is what a chaos drill's checks read of its report.
type chaosReport struct {
	drillReport
	Perplexity *float64 `json:"test_perplexity"`
}

func (d chaosDrill) planned() int { return len(d.kill) + len(d.evict) }

func (d chaosDrill) check(rep chaosReport) []string {
	var bad []string
	if rep.AckedUpdatesLost == nil || *rep.AckedUpdatesLost != 0 {
		bad = append(bad, fmt.Sprintf("acked_updates_lost %v", ptr(rep.AckedUpdatesLost)))
	}
	if rep.AckedUpdatesDuplicated == nil || *rep.AckedUpdatesDuplicated != 0 {
		bad = append(bad, fmt.Sprintf("applied twice %v", ptr(rep.AckedUpdatesDuplicated)))
	}
	// Loose: faults may cost a few hundredths, not the model.
	if d.app == "lr" && (rep.TestAccuracy == nil || *rep.TestAccuracy < 0.80) {
		bad = append(bad, fmt.Sprintf("test accuracy %v", ptr(rep.TestAccuracy)))
	}
	if d.app == "lda" && (rep.Perplexity == nil || *rep.Perplexity > 3000) {
		bad = append(bad, fmt.Sprintf("test perplexity %v", ptr(rep.Perplexity)))
	}
	return bad
}

// tierChaosDrill is one random schedule of tiers of reliability: lr on
// a9a with reliable and transient machines, a stage, and one to three
// faults of the transient class at random times in the first 10 s of
// training: a SIGKILL or an eviction notice to one machine or to all of
// them, or new machines.
type tierChaosDrill struct {
	reliable, transient, passes int
	stage                       string
	seed                        uint64
	kill, evict, add            []string // class@count@time
}

func newTierChaosDrill(seed uint64) tierChaosDrill {
	r := rand.New(rand.NewPCG(seed, 0x71e75))
	d := tierChaosDrill{reliable: 1 + r.IntN(2), transient: 2 + r.IntN(3), stage: []string{"1", "2", "3", "auto"}[r.IntN(4)],
		passes: 40 + r.IntN(41), seed: seed}
	for range 1 + r.IntN(3) {
		at := 1.5 + 8.5*r.Float64()
		switch r.IntN(5) {
		case 0:
			d.kill = append(d.kill, fmt.Sprintf("transient@1@%.1fs", at))
		case 1:
			d.kill = append(d.kill, fmt.Sprintf("transient@all@%.1fs", at))
		case 2:
			d.evict = append(d.evict, fmt.Sprintf("transient@1@%.1fs", at))
		case 3:
			d.evict = append(d.evict, fmt.Sprintf("transient@all@%.1fs", at))
		default:
			d.add = append(d.add, fmt.Sprintf("transient@%d@%.1fs", 1+r.IntN(2), at))
		}
	}
	return d
}

func (d tierChaosDrill) args() []string {
	a := []string{"train", "--processes", "--reliable", strconv.Itoa(d.reliable), "--transient", strconv.Itoa(d.transient),
		"--stage", d.stage, "--passes", strconv.Itoa(d.passes), "--seed", strconv.FormatUint(d.seed, 10),
		"--audit-every", "1", "--failure-timeout", "2s", "--timeout", "4m"}
	for _, f := range []struct {
		flag string
		v    []string
	}{{"--kill", d.kill}, {"--evict", d.evict}, {"--add", d.add}} {
		if len(f.v) > 0 {
			a = append(a, f.flag, strings.Join(f.v, ","))
		}
	}
	return a
}

func (d tierChaosDrill) planned() int { return len(d.kill) + len(d.evict) + len(d.add) }

// check holds the tiers' promises (docs/design/tiers.md): the ledgers
// count every acknowledged update a revocation without notice lost (the
// audit loses nothing beyond their count, and they count at least what
// it lost), nothing is applied twice, and a notice loses nothing.
func (d tierChaosDrill) check(rep chaosReport) []string {
	bad := chaosDrill{app: "lr"}.check(rep)
	t := rep.TierReport
	if t == nil || t.UpdatesLost == nil || t.UpdatesLostAudit == nil || t.UpdatesLostLedgerAudit == nil {
		return append(bad, "no tiers' loss counts in the report")
	}
	if *t.UpdatesLostLedgerAudit < *t.UpdatesLostAudit {
		bad = append(bad, fmt.Sprintf("the ledgers count %d audit pushes lost, the audit %d", *t.UpdatesLostLedgerAudit, *t.UpdatesLostAudit))
	}
	if len(d.kill) == 0 && *t.UpdatesLost != 0 {
		bad = append(bad, fmt.Sprintf("%d updates lost with notices alone", *t.UpdatesLost))
	}
	for _, n := range rep.Notes {
		if strings.Contains(n, "outside ledger >= audit") || strings.Contains(n, "survived, but the ledgers count") {
			bad = append(bad, n)
		}
	}
	return bad
}

// TestChaosDrills runs random fault schedules against real processes
// (TERRACE_CHAOS_DRILLS=N of them, from TERRACE_CHAOS_SEED, 1 if unset),
// as the simulation runs random schedules in one process: each must end
// with exit 0, no acknowledged update lost or applied twice by the
// audit, and a sane test metric. A failure names the seed; one drill
// again is `TERRACE_CHAOS_DRILLS=1 TERRACE_CHAOS_SEED=S`.
func TestChaosDrills(t *testing.T) {
	runChaos(t, "TERRACE_CHAOS_DRILLS", func(seed uint64) chaosSchedule { return newChaosDrill(seed) })
}

// TestTierChaosDrills runs random schedules of tiers of reliability
// (TERRACE_CHAOS_TIER_DRILLS=N of them, from TERRACE_CHAOS_SEED) against
// real processes, as TERRACE_SIM_MIX=tiers does in the simulation: each
// must end with exit 0 and tierChaosDrill.check's promises kept.
func TestTierChaosDrills(t *testing.T) {
	runChaos(t, "TERRACE_CHAOS_TIER_DRILLS", func(seed uint64) chaosSchedule { return newTierChaosDrill(seed) })
}

// runChaos runs the number of drills env says, drawn by draw.
func runChaos(t *testing.T, env string, draw func(seed uint64) chaosSchedule) {
	n, _ := strconv.Atoi(os.Getenv(env))
	if n <= 0 {
		t.Skip("set " + env + "=N")
	}
	first, _ := strconv.ParseUint(os.Getenv("TERRACE_CHAOS_SEED"), 10, 64)
	if first == 0 {
		first = 1
	}
	bin := terrace(t)
	for seed := first; seed < first+uint64(n); seed++ {
		d := draw(seed)
		dir := t.TempDir()
		report := filepath.Join(dir, "r.json")
		args := append(d.args(), "--run-dir", filepath.Join(dir, "run"), "--report", report)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		start := time.Now()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = repoFile("") // the shipped data sets, as the README runs it
		out, err := cmd.CombinedOutput()
		cancel()
		var rep chaosReport
		b, rerr := os.ReadFile(report)
		if rerr == nil {
			rerr = json.Unmarshal(b, &rep)
		}
		var bad []string
		if err != nil || rerr != nil {
			bad = append(bad, fmt.Sprintf("exit %v, report %v", err, rerr))
		} else {
			bad = d.check(rep)
		}
		line := fmt.Sprintf("seed %d: %s (%d faults planned, %d process faults injected; %.0f s)", seed, strings.Join(d.args(), " "), d.planned(), len(rep.Faults), time.Since(start).Seconds())
		if len(bad) > 0 {
			t.Errorf("%s: %s\n%s", line, strings.Join(bad, "; "), out)
			continue
		}
		t.Log(line)
	}
}

// TestTierChaosCheck: the tier drills' checks catch each broken promise.
func TestTierChaosCheck(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	acc := 0.85
	good := func() chaosReport {
		var r chaosReport
		r.TestAccuracy, r.AckedUpdatesLost, r.AckedUpdatesDuplicated = &acc, n(0), n(0)
		r.TierReport = &drill.TierReport{UpdatesLost: n(900), UpdatesLostAudit: n(200), UpdatesLostLedgerAudit: n(210)}
		return r
	}
	killed := tierChaosDrill{kill: []string{"transient@all@3s"}}
	noticed := tierChaosDrill{evict: []string{"transient@all@3s"}}
	if bad := killed.check(good()); len(bad) > 0 {
		t.Errorf("a sound report: %v", bad)
	}
	for _, tc := range []struct {
		name string
		d    tierChaosDrill
		edit func(*chaosReport)
	}{
		{"ledgers below the audit", killed, func(r *chaosReport) { r.UpdatesLostLedgerAudit = n(199) }},
		{"lost with notices alone", noticed, func(*chaosReport) {}},
		{"lost beyond the ledgers", killed, func(r *chaosReport) { r.AckedUpdatesLost = n(2) }},
		{"applied twice", killed, func(r *chaosReport) { r.AckedUpdatesDuplicated = n(1) }},
		{"no tier counts", killed, func(r *chaosReport) { r.TierReport = nil }},
		{"a survivor's breach", killed, func(r *chaosReport) {
			r.Notes = []string{"worker rank 1 survived, but the ledgers count 3 of its audit pushes lost and the audit 4"}
		}},
	} {
		r := good()
		tc.edit(&r)
		if bad := tc.d.check(r); len(bad) == 0 {
			t.Errorf("%s: not caught", tc.name)
		}
	}
}
