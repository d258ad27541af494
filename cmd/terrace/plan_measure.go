package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/internal/harness/drill"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/planner"
)

// calibrationReport is what `terrace plan --measure` measured, in its
// report under "calibration".
type calibrationReport struct {
	// Seconds is the calibration's wall time, every stage's start-up
	// included; WarmupSeconds and WindowSeconds what each stage waited
	// after training started and then measured.
	Seconds       float64               `json:"seconds"`
	WarmupSeconds float64               `json:"warmup_seconds"`
	WindowSeconds float64               `json:"window_seconds"`
	Samples       []planner.StageSample `json:"samples"`
	// RunDirs are the stages' run directories (logs) that were kept: a
	// stage that failed, or every stage with --measure-keep-runs.
	RunDirs []string `json:"run_dirs,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// measureFlags are plan's flags for --measure.
type measureFlags struct {
	warmup, window, startTimeout time.Duration
	keepRuns                     bool
	app                          appFlags
}

func (m *measureFlags) register(fs *pflag.FlagSet) {
	fs.DurationVar(&m.warmup, "measure-warmup", 3*time.Second, "with --measure: how long each stage's job trains before it is measured (on links slow enough to hold the stream back, 20s: the stream takes that long to settle; docs/design/tiers.md)")
	fs.DurationVar(&m.window, "measure-window", 8*time.Second, "with --measure: how long each stage's job is measured")
	fs.DurationVar(&m.startTimeout, "measure-start-timeout", 2*time.Minute, "with --measure: give up if a stage's job has not acknowledged a push within this time")
	fs.BoolVar(&m.keepRuns, "measure-keep-runs", false, "with --measure: keep every stage's run directory (its processes' logs; a stage that fails keeps its own anyway)")
	// The job to calibrate: train's application flags, but for
	// --consistency, which plan has already.
	app := pflag.NewFlagSet("app", pflag.ContinueOnError)
	m.app.register(app)
	app.VisitAll(func(f *pflag.Flag) {
		if fs.Lookup(f.Name) == nil {
			f.Usage = "with --measure: " + f.Usage
			fs.AddFlag(f)
		}
	})
	// --epochs, which the help names, was refused ("unknown flag"): the
	// alias was the app flag set's, not plan's.
	fs.SetNormalizeFunc(passesAlias)
	m.app.fs = fs
}

// check refuses bad --measure flags before anything starts; errors name
// the flag.
func (m *measureFlags) check(fs *pflag.FlagSet, measure bool, consistency string) error {
	if !measure {
		for _, name := range []string{"measure-warmup", "measure-window", "measure-start-timeout", "measure-keep-runs", "app", "train", "test", "passes", "batch"} {
			if fs.Changed(name) {
				return fmt.Errorf("--%s needs --measure", name)
			}
		}
		return nil
	}
	switch {
	case m.warmup < 0:
		return fmt.Errorf("--measure-warmup %v: must be >= 0", m.warmup)
	case m.window < time.Second:
		return fmt.Errorf("--measure-window %v: must be at least 1s (the servers print their counters every 500ms)", m.window)
	case m.startTimeout <= 0:
		return fmt.Errorf("--measure-start-timeout %v: must be positive", m.startTimeout)
	}
	m.app.consistency = workerConsistency(consistency)
	if _, err := m.app.job(nil); err != nil { // the workers' own checks, before any process starts
		return err
	}
	return nil
}

// workerConsistency is plan's --consistency as the workers take it (plan
// accepts "ssp" for train's default, ssp:2).
func workerConsistency(c string) string {
	if c == "ssp" {
		return "ssp:2"
	}
	return c
}

// measurePasses is the calibration job's length unless --passes says
// otherwise: more than any stage trains in its warm-up and window.
const measurePasses = 100000

// measureJob runs the calibration job in every stage the machines can
// form, one after the other, and returns what each measured.
func measureJob(ctx context.Context, f planFlags, fs *pflag.FlagSet, out io.Writer) (*calibrationReport, error) {
	mf := &f.measureFlags
	var links *tier.ByClass
	if f.links != "" {
		l, err := tier.ParseByClass("--link-mbps", f.links, tier.ByClass{})
		if err != nil {
			return nil, err
		}
		links = &l
	}
	args := append(appArgs(fs), "--consistency="+workerConsistency(f.consistency))
	if !fs.Changed("passes") && !fs.Changed("epochs") {
		// Each stage's job is stopped once measured, so its length is
		// only a floor: the app's default (10 passes of a9a) ended before
		// the window on a quiet host, and the calibration failed.
		args = append(args, "--passes="+strconv.Itoa(measurePasses))
	}
	rep := &calibrationReport{WarmupSeconds: mf.warmup.Seconds(), WindowSeconds: mf.window.Seconds()}
	start := time.Now()
	fmt.Fprintf(out, "terrace plan: calibrating: a short %s job on %d reliable and %d transient machine(s) (each a server and %d worker(s), processes on this host), links %s, in each stage; %v of training, then %v measured\n",
		mf.app.app, f.reliable, f.transient, f.workersPerMachine, linkWords(links), mf.warmup, mf.window)
	for _, s := range tier.Stages {
		if s.Formable(f.reliable, f.transient) != nil {
			continue
		}
		sample, dir, notes, err := measureStage(ctx, f, s, links, args, out)
		rep.Notes = append(rep.Notes, notes...)
		if err != nil {
			if dir == "" {
				// The cluster did not start: its error names the log.
				return rep, fmt.Errorf("--measure: stage %d: %w", s, err)
			}
			rep.RunDirs = append(rep.RunDirs, dir)
			return rep, fmt.Errorf("--measure: stage %d: %w (logs in %s)", s, err, dir)
		}
		if mf.keepRuns {
			rep.RunDirs = append(rep.RunDirs, dir)
		} else if err := os.RemoveAll(dir); err != nil {
			// Each stage's logs were left in TMPDIR, named only in the report.
			fmt.Fprintf(out, "terrace plan: removing stage %d's run directory: %v\n", s, err)
		}
		rep.Samples = append(rep.Samples, sample)
	}
	rep.Seconds = time.Since(start).Seconds()
	fmt.Fprintf(out, "terrace plan: calibrated in %.1fs\n", rep.Seconds)
	return rep, nil
}

func linkWords(l *tier.ByClass) string {
	if l == nil {
		return "not emulated"
	}
	return l.String() + " Mbit/s"
}

// measureStage runs the job in stage s until its window is measured.
func measureStage(ctx context.Context, f planFlags, s tier.Stage, links *tier.ByClass, args []string, out io.Writer) (planner.StageSample, string, []string, error) {
	mf := &f.measureFlags
	began := time.Now()
	fmt.Fprintf(out, "terrace plan: stage %d: starting the job\n", s)
	c, err := drill.StartCluster(ctx, drill.ClusterConfig{
		Servers: f.reliable + f.transient, Workers: (f.reliable + f.transient) * f.workersPerMachine, WorkersPerMachine: f.workersPerMachine,
		Stage: s.String(), SyncInterval: f.sync, Replication: f.replication, LinkMbps: links,
		WorkerArgs: args, Audit: &drill.Audit{}, StartTimeout: mf.startTimeout,
	})
	if err != nil {
		return planner.StageSample{}, "", nil, err
	}
	dir := c.RunDir()
	defer c.Close()
	for _, class := range []drill.Role{drill.Reliable, drill.Transient} {
		n := f.reliable
		if class == drill.Transient {
			n = f.transient
		}
		for range n {
			if _, err := c.StartMachine(class); err != nil {
				return planner.StageSample{}, dir, nil, err
			}
		}
	}
	wait := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return c.Err()
		case <-c.Finished():
			return fmt.Errorf("the job finished before it was measured: give it more passes (--passes) or a shorter --measure-warmup/--measure-window")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	startBy := time.NewTimer(mf.startTimeout)
	defer startBy.Stop()
	select {
	case <-c.Training():
	case <-startBy.C:
		return planner.StageSample{}, dir, nil, fmt.Errorf("no push acknowledged within --measure-start-timeout %v: %w", mf.startTimeout, c.Err())
	case <-ctx.Done():
		return planner.StageSample{}, dir, nil, ctx.Err()
	}
	fmt.Fprintf(out, "terrace plan: stage %d: training after %.1fs; measuring from %v on for %v\n", s, time.Since(began).Seconds(), mf.warmup, mf.window)
	if err := wait(mf.warmup); err != nil {
		return planner.StageSample{}, dir, nil, err
	}
	p0 := takeProbe(c)
	if err := wait(mf.window); err != nil {
		return planner.StageSample{}, dir, nil, err
	}
	p1 := takeProbe(c)
	c.Close() // the workers flush their audit logs as they stop
	sample, notes, err := stageSample(f, s, p0, p1, c.AuditLogs())
	if err != nil {
		return sample, dir, notes, err
	}
	fmt.Fprintf(out, "terrace plan: stage %d: %.0f updates/s (%.0f reliable, %.0f transient), %.2f ms of processor per update, %.0f B/s streamed, in %.1fs\n",
		s, (sample.Updates.Reliable+sample.Updates.Transient)/sample.Seconds, sample.Updates.Reliable/sample.Seconds, sample.Updates.Transient/sample.Seconds,
		1e3*sample.NodeCPUSeconds/(sample.Updates.Reliable+sample.Updates.Transient), sample.StreamBytes, time.Since(began).Seconds())
	return sample, dir, notes, nil
}

// probe is a cluster and its host at a moment.
type probe struct {
	at        time.Time
	nodes     []drill.NodeSample
	hostBusy  float64
	hostProcs int
	hostErr   error
}

func takeProbe(c *drill.Cluster) probe {
	p := probe{at: time.Now(), nodes: c.Sample()}
	p.hostBusy, p.hostProcs, p.hostErr = drill.HostCPU()
	return p
}

// serverCounters are the server statistics a calibration reads.
type serverCounters struct {
	Role        string  `json:"role"`
	BytesIn     float64 `json:"bytes_in"`
	StreamBytes float64 `json:"stream_bytes"`
	LedgerBytes float64 `json:"ledger_bytes"`
	Pushes      float64 `json:"pushes"`
	Pulls       float64 `json:"pulls"`
	Clocks      float64 `json:"clocks"`
	KeysPulled  float64 `json:"keys_pulled"`
	StoreBytes  float64 `json:"store_bytes"`
}

// stageSample turns two probes of stage s's job and its workers' audit
// logs into what the planner calibrates from.
func stageSample(f planFlags, s tier.Stage, p0, p1 probe, logs map[int]*drill.WorkerLog) (planner.StageSample, []string, error) {
	var notes []string
	t0, t1 := p0.at.UnixNano(), p1.at.UnixNano()
	out := planner.StageSample{Stage: s, Seconds: p1.at.Sub(p0.at).Seconds()}
	before := map[string]drill.NodeSample{}
	for _, n := range p0.nodes {
		before[n.Name] = n
	}
	var storeBackup, storeHeads float64
	for _, n := range p1.nodes {
		b, ok := before[n.Name]
		if !ok {
			continue
		}
		class := tier.Reliable
		if n.Class == drill.Transient {
			class = tier.Transient
		}
		cpu := -1.0
		if n.CPUSeconds >= 0 && b.CPUSeconds >= 0 {
			cpu = n.CPUSeconds - b.CPUSeconds
			out.NodeCPUSeconds += cpu
		} else if n.Role != drill.Coordinator {
			notes = append(notes, fmt.Sprintf("stage %d: no processor time for %s", s, n.Name))
		}
		switch n.Role {
		case drill.Worker:
			l := logs[n.Worker]
			if l == nil {
				notes = append(notes, fmt.Sprintf("stage %d: %s wrote no audit log", s, n.Name))
				continue
			}
			var acked float64
			for _, at := range l.Times {
				if at > t0 && at <= t1 {
					acked++
				}
			}
			addClass(&out.Updates, class, acked)
			if cpu > 0 && acked > 0 {
				addClass(&out.WorkerCPUSeconds, class, cpu)
			}
		case drill.Server:
			var c0, c1 serverCounters
			if json.Unmarshal(b.Stats, &c0) != nil || json.Unmarshal(n.Stats, &c1) != nil {
				notes = append(notes, fmt.Sprintf("stage %d: no statistics from %s", s, n.Name))
				continue
			}
			if c1.Role == "server" || c1.Role == "activeps" {
				if cpu > 0 {
					out.HeadCPUSeconds += cpu
				}
				storeHeads += c1.StoreBytes
			}
			if c1.Role == "backupps" {
				storeBackup += c1.StoreBytes
			}
			// Each server's counters over the window of its own lines.
			secs := n.StatsAt.Sub(b.StatsAt).Seconds()
			if secs <= 0 {
				continue
			}
			out.BytesIn += (c1.BytesIn - c0.BytesIn) / secs
			out.StreamBytes += (c1.StreamBytes - c0.StreamBytes) / secs
			out.LedgerBytes += (c1.LedgerBytes - c0.LedgerBytes) / secs
			out.Pushes += (c1.Pushes - c0.Pushes) / secs
			out.Pulls += (c1.Pulls - c0.Pulls) / secs
			out.Clocks += (c1.Clocks - c0.Clocks) / secs
			out.KeysPulled += (c1.KeysPulled - c0.KeysPulled) / secs
		}
	}
	k := max(1, f.replication)
	if s == tier.Stage1 {
		out.ChainLength = min(k, f.reliable)
		out.ModelStateBytes = storeHeads / float64(out.ChainLength)
	} else {
		out.ChainLength, out.BackupCopies = min(k, f.transient), min(k, f.reliable)
		out.ModelStateBytes = storeBackup / float64(out.BackupCopies)
	}
	if p0.hostErr == nil && p1.hostErr == nil {
		out.HostBusySeconds, out.HostProcessors = p1.hostBusy-p0.hostBusy, float64(p1.hostProcs)
	} else {
		notes = append(notes, fmt.Sprintf("stage %d: the host's processor times: %v", s, errors.Join(p0.hostErr, p1.hostErr)))
	}
	if out.Updates.Reliable+out.Updates.Transient == 0 {
		return out, notes, fmt.Errorf("no update was acknowledged in the %.1fs measured", out.Seconds)
	}
	return out, notes, nil
}

func addClass(b *tier.ByClass, c tier.Class, v float64) {
	if c == tier.Transient {
		b.Transient += v
	} else {
		b.Reliable += v
	}
}

// measuredWords says where a report's figures came from.
func measuredWords(rep *planReport) string {
	if rep.Calibration == nil {
		return "default measurements (lr on a9a)"
	}
	var stages []string
	for _, s := range rep.Calibration.Samples {
		stages = append(stages, s.Stage.String())
	}
	return fmt.Sprintf("measured by a %.0fs calibration job (stages %s)", rep.Calibration.Seconds, strings.Join(stages, ", "))
}
