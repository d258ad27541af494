package planner

import (
	"fmt"
	"math"

	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// StageSample is what a calibration (`terrace plan --measure`) measured of
// the running job in one stage, over a window of its steady state: the
// raw counts, from which Calibrate derives the planner's figures. Counts
// are over the window; rates are per second.
type StageSample struct {
	Stage   tier.Stage `json:"stage"`
	Seconds float64    `json:"seconds"`
	// Updates are the updates (acknowledged minibatches) the workers on
	// each class's machines made in the window; WorkerCPUSeconds the
	// processor time those workers used in it.
	Updates          tier.ByClass `json:"updates"`
	WorkerCPUSeconds tier.ByClass `json:"worker_cpu_seconds"`
	// HeadCPUSeconds is the processor time of the servers that head slots
	// (stage 1's servers, the ActivePS); NodeCPUSeconds that of every node
	// of the job (coordinator, servers, workers).
	HeadCPUSeconds float64 `json:"head_cpu_seconds"`
	NodeCPUSeconds float64 `json:"node_cpu_seconds"`
	// HostBusySeconds is the processor time every program on the host
	// used in the window, HostProcessors how many processors it has.
	HostBusySeconds float64 `json:"host_busy_seconds"`
	HostProcessors  float64 `json:"host_processors"`
	// The servers' counters, summed over servers, per second: every byte
	// of frames they read (from workers, chain members, ActivePS), what
	// ActivePS streamed and sent to loss ledgers, pushes, pulls, clock
	// messages and keys pulled.
	BytesIn     float64 `json:"bytes_in_per_second"`
	StreamBytes float64 `json:"stream_bytes_per_second"`
	LedgerBytes float64 `json:"ledger_bytes_per_second"`
	Pushes      float64 `json:"pushes_per_second"`
	Pulls       float64 `json:"pulls_per_second"`
	Clocks      float64 `json:"clocks_per_second"`
	KeysPulled  float64 `json:"keys_pulled_per_second"`
	// ChainLength is the length of the heads' chains in the stage (k, or
	// fewer heads), BackupCopies the BackupPS copies of each slot (0 in
	// stage 1).
	ChainLength  int `json:"chain_length"`
	BackupCopies int `json:"backup_copies"`
	// ModelStateBytes is what one copy of every key's state takes on the
	// servers (their stores' bytes over the copies).
	ModelStateBytes float64 `json:"model_state_bytes"`
}

// rate is the sample's updates per second.
func (s StageSample) rate() float64 { return (s.Updates.Reliable + s.Updates.Transient) / s.Seconds }

// Reply sizes of the wire format (docs/format/wire.md): what a worker
// receives per pull besides the values (header and clock), per push and
// per clock message; values are float32.
const (
	pullReplyBytes  = 32 + 8
	pushReplyBytes  = 40
	clockReplyBytes = 48
	valueBytes      = 4
)

// ErrCalibration is wrapped by Calibrate's errors.
var ErrCalibration = fmt.Errorf("%w: calibration", ErrMeasurements)

// Calibrate returns m with every figure the samples measure in place of
// its own: the workers' and heads' update rates per processor-second, the
// bytes per update of pushes and pulls, the chain, the stream and the
// ledger (each stage's own in Stages), the model's state, and, on one
// host, the processors the job can have and each stage's processor time
// per update. Figures no sample measures (links, prices, BackupPS ingest)
// stay m's.
func Calibrate(m Measurements, samples []StageSample) (Measurements, error) {
	if len(samples) == 0 {
		return m, fmt.Errorf("%w: no stage was measured", ErrCalibration)
	}
	for _, s := range samples {
		if !s.Stage.Valid() || s.Seconds <= 0 || s.rate() <= 0 {
			return m, fmt.Errorf("%w: stage %d: %.0f updates in %.2fs: nothing to measure", ErrCalibration, s.Stage, s.Updates.Reliable+s.Updates.Transient, s.Seconds)
		}
	}
	// A worker cannot go faster than one processor: its update rate per
	// processor-second of its own is the rate nothing else holds back
	// (pooled over every stage where the class's workers ran).
	var upd, cpu, headUpd, headCPU tier.ByClass
	for _, s := range samples {
		for _, c := range tier.Classes {
			if s.WorkerCPUSeconds.Of(c) > 0 && s.Updates.Of(c) > 0 {
				add(&upd, c, s.Updates.Of(c))
				add(&cpu, c, s.WorkerCPUSeconds.Of(c))
			}
		}
		// Heads saturate together (every update's keys spread over all of
		// them): their capacity is the rate at which their busiest
		// processor time would reach a whole processor each.
		hc, _ := heads(s.Stage, m)
		if s.HeadCPUSeconds > 0 {
			add(&headUpd, hc, s.Updates.Reliable+s.Updates.Transient)
			add(&headCPU, hc, s.HeadCPUSeconds)
		}
	}
	for _, c := range tier.Classes {
		if cpu.Of(c) > 0 {
			set(&m.WorkerUpdates, c, upd.Of(c)/cpu.Of(c))
		}
		if headCPU.Of(c) > 0 {
			set(&m.ServerUpdates, c, headUpd.Of(c)/headCPU.Of(c))
		}
	}
	// Only ActivePS stream and send ledgers: a stage-1 sample's frames
	// read are the workers' and the chain's.
	client := func(s StageSample) float64 { return (s.BytesIn - s.StreamBytes - s.LedgerBytes) / s.rate() }
	up, n := 0.0, 0
	for _, s := range samples {
		if s.ChainLength <= 1 {
			up += client(s)
			n++
		}
	}
	m.Stages = map[tier.Stage]StageFigures{}
	if n > 0 {
		// A stage without chains: every frame read came from a worker.
		m.UpBytes = up / float64(n)
	}
	var downRate, down float64
	var hostCores, state float64
	for _, s := range samples {
		f := s.rate()
		fig := StageFigures{CPUSecondsPerUpdate: s.NodeCPUSeconds / (f * s.Seconds)}
		if s.ChainLength > 1 {
			if n > 0 {
				// The rest of what heads read is chain traffic, (k-1) copies.
				fig.ChainBytes = math.Max(0, client(s)-m.UpBytes) / float64(s.ChainLength-1)
			}
		}
		if s.BackupCopies > 0 {
			fig.StreamBytes = s.StreamBytes / f / float64(s.BackupCopies)
			fig.LedgerBytes = s.LedgerBytes / f / float64(s.BackupCopies)
		}
		m.Stages[s.Stage] = fig
		downRate += (s.Pulls*pullReplyBytes + s.KeysPulled*valueBytes + s.Pushes*pushReplyBytes + s.Clocks*clockReplyBytes)
		down += f
		state = math.Max(state, s.ModelStateBytes)
		hostCores += math.Max(0, s.HostProcessors-math.Max(0, s.HostBusySeconds-s.NodeCPUSeconds)/s.Seconds)
	}
	m.DownBytes = downRate / down
	for _, s := range samples {
		if s.BackupCopies > 0 && m.SyncSeconds > 0 {
			// An interval's stream carries at least what it was measured
			// to carry: the pairs of every push, and whole slots where a
			// BackupPS is not in step, do not aggregate as keys do.
			state = math.Max(state, s.StreamBytes/float64(s.BackupCopies)*m.SyncSeconds)
		}
	}
	if state > 0 {
		m.ModelStateBytes = state
	}
	if n == 0 {
		// Every stage had chains: what heads read is up + (k-1) chain
		// bytes, not separable. A head replicates the state of the keys
		// pushed, about as many bytes as the push: take the chain as the
		// push and the rest as the workers'.
		for _, s := range samples {
			fig := m.Stages[s.Stage]
			fig.ChainBytes = client(s) / float64(s.ChainLength)
			m.Stages[s.Stage] = fig
			up += fig.ChainBytes
		}
		m.UpBytes = up / float64(len(samples))
	}
	// The general figures are the first stage's that measured them (the
	// planner's defaults for a stage the calibration did not run).
	streamSet, chainSet := false, false
	for _, s := range samples {
		fig := m.Stages[s.Stage]
		if s.BackupCopies > 0 && !streamSet {
			m.StreamBytes, m.LedgerBytes, streamSet = fig.StreamBytes, fig.LedgerBytes, true
		}
		if s.ChainLength > 1 && !chainSet {
			m.ChainBytes, chainSet = fig.ChainBytes, true
		}
	}
	if samples[0].HostProcessors > 0 {
		// Processors the job had: the host's, less what other programs
		// used in the windows (the mean over the stages).
		m.HostCores = math.Max(hostCores/float64(len(samples)), 0.05)
		m.HostUpdates = 0
	}
	return m, m.Validate()
}

func add(b *tier.ByClass, c tier.Class, v float64) {
	if c == tier.Transient {
		b.Transient += v
	} else {
		b.Reliable += v
	}
}

func set(b *tier.ByClass, c tier.Class, v float64) {
	if c == tier.Transient {
		b.Transient = v
	} else {
		b.Reliable = v
	}
}
