package planner

import (
	"errors"
	"fmt"
	"math"

	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// Measurements are what the planner knows of the running job and of the
// machines it could use. Rates are per second; an update is one push of
// one worker's minibatch (with the pull that goes with it). A capacity of
// 0 means "not a limit".
type Measurements struct {
	// Reliable and Transient are the machines of each class.
	Reliable  int `json:"reliable"`
	Transient int `json:"transient"`
	// WorkersPerMachine is how many workers run on a machine that runs
	// workers (1 if 0).
	WorkersPerMachine int `json:"workers_per_machine"`
	// WorkerUpdates is one worker's update rate when nothing else holds it
	// back, by the class of its machine.
	WorkerUpdates tier.ByClass `json:"worker_updates_per_second"`
	// UpBytes is what a worker sends the servers per update (the push and
	// the pull request, with their headers); DownBytes what it receives
	// (the pull's values and the replies).
	UpBytes   float64 `json:"up_bytes_per_update"`
	DownBytes float64 `json:"down_bytes_per_update"`
	// ChainBytes is what a head sends each other member of a slot's chain
	// per update, after the head's aggregation.
	ChainBytes float64 `json:"chain_bytes_per_update"`
	// Replication is k, the length of every chain (of servers in stage 1,
	// of ActivePS and of BackupPS in stages 2 and 3); 1 if 0.
	Replication int `json:"replication"`
	// StreamBytes is what the ActivePS stream to each BackupPS copy per
	// update, after aggregation over a sync interval.
	StreamBytes float64 `json:"stream_bytes_per_update"`
	// ModelStateBytes is the state of every key (values and optimizer
	// state) and SyncSeconds the sync interval: an ActivePS streams a key
	// at most once per interval, so the stream never exceeds
	// ModelStateBytes/SyncSeconds per BackupPS copy. 0: no such cap.
	ModelStateBytes float64 `json:"model_state_bytes"`
	SyncSeconds     float64 `json:"sync_seconds"`
	// LedgerBytes is what an ActivePS sends each BackupPS copy per update
	// to count the updates it acknowledges (the (client, seq) pair).
	LedgerBytes float64 `json:"ledger_bytes_per_update"`
	// LinkBytes is one machine's link bandwidth in each direction.
	LinkBytes tier.ByClass `json:"link_bytes_per_second"`
	// ServerUpdates is the updates per second one server applies as head
	// (with its share of replica work), by class; BackupIngestBytes the
	// stream bytes per second one BackupPS installs.
	ServerUpdates     tier.ByClass `json:"server_updates_per_second"`
	BackupIngestBytes float64      `json:"backup_ingest_bytes_per_second"`
	// HostUpdates caps the whole cluster's updates per second when every
	// "machine" is emulated on one host and they share its processors.
	HostUpdates float64 `json:"host_updates_per_second"`
	// Price is dollars per machine-hour.
	Price tier.ByClass `json:"dollars_per_machine_hour"`
	// HostCores is how many of the emulating host's processors the job
	// can have (its processors less what other programs used while it was
	// measured); with a stage's CPUSecondsPerUpdate it caps that stage at
	// HostCores / CPUSecondsPerUpdate updates per second, in place of
	// HostUpdates. 0: not a limit.
	HostCores float64 `json:"host_cores,omitempty"`
	// Stages holds figures measured in one stage that differ between
	// stages (calibrate.go); a zero field keeps the figure above.
	Stages map[tier.Stage]StageFigures `json:"stages,omitempty"`
	// Independent says workers do not wait for each other (asynchronous
	// consistency). Otherwise (BSP, SSP) they move in lockstep: every
	// worker makes the same number of updates, so the slowest class paces
	// the rest.
	Independent bool `json:"independent"`
}

// ErrMeasurements is wrapped by every error about a Measurements value.
var ErrMeasurements = errors.New("planner: bad measurements")

// Validate checks m, naming the first field that is wrong.
func (m Measurements) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrMeasurements}, args...)...)
	}
	if m.Reliable < 1 {
		return bad("Reliable = %d: the coordinator and the authoritative copy need a reliable machine", m.Reliable)
	}
	if m.Transient < 0 || m.WorkersPerMachine < 0 || m.Replication < 0 {
		return bad("negative Transient, WorkersPerMachine or Replication")
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"WorkerUpdates.Reliable", m.WorkerUpdates.Reliable}, {"WorkerUpdates.Transient", m.WorkerUpdates.Transient},
		{"UpBytes", m.UpBytes}, {"DownBytes", m.DownBytes}, {"ChainBytes", m.ChainBytes},
		{"StreamBytes", m.StreamBytes}, {"ModelStateBytes", m.ModelStateBytes}, {"SyncSeconds", m.SyncSeconds},
		{"LedgerBytes", m.LedgerBytes}, {"LinkBytes.Reliable", m.LinkBytes.Reliable}, {"LinkBytes.Transient", m.LinkBytes.Transient},
		{"ServerUpdates.Reliable", m.ServerUpdates.Reliable}, {"ServerUpdates.Transient", m.ServerUpdates.Transient},
		{"BackupIngestBytes", m.BackupIngestBytes}, {"HostUpdates", m.HostUpdates},
		{"Price.Reliable", m.Price.Reliable}, {"Price.Transient", m.Price.Transient},
	} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return bad("%s = %g: want a finite number >= 0", f.name, f.v)
		}
	}
	if m.WorkerUpdates.Reliable <= 0 || (m.Transient > 0 && m.WorkerUpdates.Transient <= 0) {
		return bad("WorkerUpdates = %v: every class with machines needs a worker update rate > 0", m.WorkerUpdates)
	}
	if m.Price.Reliable <= 0 || (m.Transient > 0 && m.Price.Transient <= 0) {
		return bad("Price = %v: every class with machines needs a price > 0", m.Price)
	}
	if m.HostCores < 0 || math.IsNaN(m.HostCores) || math.IsInf(m.HostCores, 0) {
		return bad("HostCores = %g: want a finite number >= 0", m.HostCores)
	}
	for s, f := range m.Stages {
		for _, v := range []float64{f.StreamBytes, f.LedgerBytes, f.ChainBytes, f.CPUSecondsPerUpdate} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return bad("Stages[%d] = %+v: want finite numbers >= 0", s, f)
			}
		}
	}
	if m.ModelStateBytes > 0 && m.SyncSeconds <= 0 {
		return bad("ModelStateBytes without SyncSeconds")
	}
	return nil
}

// StageFigures are what a calibration measured in one stage: the stream
// and ledger depend on the stage's rate (aggregation), the chain on the
// ring's length, and the processor time an update costs on the stage's
// work (ActivePS chains, the stream, the ledger).
type StageFigures struct {
	StreamBytes float64 `json:"stream_bytes_per_update,omitempty"`
	LedgerBytes float64 `json:"ledger_bytes_per_update,omitempty"`
	ChainBytes  float64 `json:"chain_bytes_per_update,omitempty"`
	// CPUSecondsPerUpdate is the processor time of every node of the job
	// (coordinator, servers, workers) per update.
	CPUSecondsPerUpdate float64 `json:"cpu_seconds_per_update,omitempty"`
}

// forStage is m with stage s's own figures in place of the general ones.
func (m Measurements) forStage(s tier.Stage) Measurements {
	f, ok := m.Stages[s]
	if !ok {
		return m
	}
	set := func(dst *float64, v float64) {
		if v > 0 {
			*dst = v
		}
	}
	set(&m.StreamBytes, f.StreamBytes)
	set(&m.LedgerBytes, f.LedgerBytes)
	set(&m.ChainBytes, f.ChainBytes)
	if m.HostCores > 0 && f.CPUSecondsPerUpdate > 0 {
		m.HostUpdates = m.HostCores / f.CPUSecondsPerUpdate
	}
	return m
}

func (m Measurements) k() int                 { return max(1, m.Replication) }
func (m Measurements) workersPerMachine() int { return max(1, m.WorkersPerMachine) }

func (m Measurements) machines(c tier.Class) int {
	if c == tier.Transient {
		return m.Transient
	}
	return m.Reliable
}

// DollarsPerHour is what the machines cost. Every stage keeps every
// machine: in stage 1 the transient ones run workers, in stage 3 the
// reliable ones run BackupPS.
func (m Measurements) DollarsPerHour() float64 {
	return float64(m.Reliable)*m.Price.Reliable + float64(m.Transient)*m.Price.Transient
}

// Defaults are the measurements `terrace plan` assumes without --measure:
// sparse logistic regression (apps/lr, FTRL, minibatch 100) on the a9a
// data the project ships, measured on the 2-core development machine, on
// machines with a 1 Gbit/s link and 2015 us-east-1 c3.xlarge prices. Where
// each figure comes from is written beside it; docs/design/tiers.md has
// the commands.
func Defaults(reliable, transient int) Measurements {
	return Measurements{
		Reliable: reliable, Transient: transient, WorkersPerMachine: 1,
		// terrace bench app (ASP, 1 server, 1 worker), median of 3:
		// 414,961 examples/s at 100 examples per update.
		WorkerUpdates: tier.ByClass{Reliable: 4150, Transient: 4150},
		// terrace train --servers 1 --workers 1 --replication 1 --epochs 5:
		// the server read 3,065,460 bytes for 1,640 pushes (pushes, pull
		// requests and clock messages).
		UpBytes: 1870,
		// From the wire format (docs/format/wire.md) and the same run's
		// 81.6 keys per pull: a pull reply 32 + 8 + 4·81.6 bytes, a push
		// reply 40, a clock reply 48.
		DownBytes: 450,
		// From the replication format: 81.4 keys pushed per update, each
		// 8 bytes of key and 3 float32 of FTRL state, with no aggregation
		// (an upper bound; heads merge pushes that share a round).
		ChainBytes:  1700,
		Replication: 2,
		// No aggregation assumed per update; the cap below does it: the
		// model is 125 keys of 20 bytes, streamed at most once a second.
		StreamBytes: 1700, ModelStateBytes: 2500, SyncSeconds: 1,
		// A (client, seq) pair.
		LedgerBytes: 16,
		LinkBytes:   tier.ByClass{Reliable: 1e9 / 8, Transient: 1e9 / 8},
		// A replica installs copies at 197-305 MB/s (docs/design/resilience.md,
		// "Rebuilt copies and live joins"); the slowest figure.
		BackupIngestBytes: 197e6,
		// AWS us-east-1, March-August 2015 (../shared/data/spot): c3.xlarge
		// on demand, and the median of its 115,806 spot price records.
		Price: tier.ByClass{Reliable: 0.21, Transient: 0.0364},
	}
}
