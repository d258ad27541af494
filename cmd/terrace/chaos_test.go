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

// TestChaosDrills runs random fault schedules against real processes
// (TERRACE_CHAOS_DRILLS=N of them, from TERRACE_CHAOS_SEED, 1 if unset),
// as the simulation runs random schedules in one process: each must end
// with exit 0, no acknowledged update lost or applied twice by the
// audit, and a sane test metric. A failure names the seed; one drill
// again is `TERRACE_CHAOS_DRILLS=1 TERRACE_CHAOS_SEED=S`.
func TestChaosDrills(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TERRACE_CHAOS_DRILLS"))
	if n <= 0 {
		t.Skip("set TERRACE_CHAOS_DRILLS=N")
	}
	first, _ := strconv.ParseUint(os.Getenv("TERRACE_CHAOS_SEED"), 10, 64)
	if first == 0 {
		first = 1
	}
	bin := terrace(t)
	for seed := first; seed < first+uint64(n); seed++ {
		d := newChaosDrill(seed)
		dir := t.TempDir()
		report := filepath.Join(dir, "r.json")
		args := append(d.args(), "--run-dir", filepath.Join(dir, "run"), "--report", report)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		start := time.Now()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = repoFile("") // the shipped data sets, as the README runs it
		out, err := cmd.CombinedOutput()
		cancel()
		var rep struct {
			drillReport
			Perplexity *float64 `json:"test_perplexity"`
		}
		b, rerr := os.ReadFile(report)
		if rerr == nil {
			rerr = json.Unmarshal(b, &rep)
		}
		var bad []string
		if err != nil || rerr != nil {
			bad = append(bad, fmt.Sprintf("exit %v, report %v", err, rerr))
		} else {
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
		}
		planned := len(d.kill) + len(d.evict)
		line := fmt.Sprintf("seed %d: %s (faults injected: %d of %d; %.0f s)", seed, strings.Join(d.args(), " "), len(rep.Faults), planned, time.Since(start).Seconds())
		if len(bad) > 0 {
			t.Errorf("%s: %s\n%s", line, strings.Join(bad, "; "), out)
			continue
		}
		t.Log(line)
	}
}
