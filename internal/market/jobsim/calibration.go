package jobsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Calibration holds every parameter of the model. The defaults
// (DefaultCalibration) are placeholders to be measured on the real system
// once the tiers exist (docs/design/market.md says which run measures
// which); none is fitted to a price trace.
type Calibration struct {
	Note string `json:"note,omitempty"`
	// Apps gives each app's work: updates (worker minibatch pushes) per
	// pass over its data.
	Apps map[string]App `json:"apps"`
	// UpdatesPerECUHour is a worker's rate per EC2 Compute Unit, for
	// types listed in ECU; UpdatesPerHour overrides it per type.
	UpdatesPerECUHour float64            `json:"updates_per_ecu_hour"`
	ECU               map[string]float64 `json:"ecu"`
	UpdatesPerHour    map[string]float64 `json:"updates_per_hour,omitempty"`
	// ServerUpdatesPerHour is what one parameter server (or ActivePS)
	// ingests; BackupUpdatesPerHour what one BackupPS ingests; StreamRatio
	// the BackupPS load per update after the ActivePS aggregates.
	ServerUpdatesPerHour float64 `json:"server_updates_per_hour"`
	BackupUpdatesPerHour float64 `json:"backup_updates_per_hour"`
	StreamRatio          float64 `json:"stream_ratio"`
	// ReferenceType is the job's instance type; Machines the footprint of
	// the on-demand reference (and of the checkpoint and tiers policies);
	// ReliableMachines the reliable tier; MaxMachines the job's
	// parallelism (its data partitions).
	ReferenceType    string `json:"reference_type"`
	Machines         int    `json:"machines"`
	ReliableMachines int    `json:"reliable_machines"`
	MaxMachines      int    `json:"max_machines"`
	// Times, in seconds. BootSeconds is the provider's, from a request
	// to a machine that runs the job's processes; JoinSeconds the job's
	// handoff to a new machine (its key ranges and data partitions);
	// DrainSeconds the handoff away from a leaving one.
	BootSeconds         float64 `json:"boot_seconds"`
	JoinSeconds         float64 `json:"join_seconds"`
	SwitchPauseSeconds  float64 `json:"switch_pause_seconds"`
	DrainSeconds        float64 `json:"drain_seconds"`
	SyncIntervalSeconds float64 `json:"sync_interval_seconds"`
	// StartSeconds is the job's own start before any machine works: its
	// processes, the formation of its first machines and the loading of
	// their data. Paid once, from the job's start, alongside the first
	// machines' boot; machines that join later pay JoinSeconds instead.
	StartSeconds float64 `json:"start_seconds"`
	// RevocationSeconds is what a revocation without enough notice (the
	// notice shorter than DrainSeconds) stops the whole job for: the
	// coordinator's failure timeout, after which it declares the lost
	// nodes dead, falls back if it must and hands their data partitions
	// to the survivors (a silent node is declared dead 1 to 1.25 timeouts
	// after its last heartbeat).
	RevocationSeconds float64 `json:"revocation_seconds"`
	// Replication is k, the length of the coordinator's chains: a tiered
	// job falls back to stage 1 once k transient machines (ActivePS) were
	// revoked without notice since its last switch, and switches back only
	// when a transient machine joins (docs/design/tiers.md, "Bulk
	// revocation"). The coordinator's default is min(2, servers).
	Replication int `json:"replication"`
	// HostUpdatesPerHour caps the job's total rate: a property of where
	// the job runs, not of the machines. 0 (the default): no cap, as on
	// real machines, each with its own processors. Set it when every
	// "machine" is a set of processes on one host, which share its
	// processors: more of them then train no faster than the host does.
	HostUpdatesPerHour float64 `json:"host_updates_per_hour,omitempty"`
	// HostUpdatesPerHourByStage is the same cap measured per stage ("0":
	// without tiers, "1" to "3"), overriding HostUpdatesPerHour for the
	// stages it names: on one host an update costs the host's processors
	// more or less by stage (a chain of k servers applies it k times, a
	// BackupPS installs its stream), as the planner's per-stage CPU
	// seconds per update say (planner.Measurements.HostCores).
	HostUpdatesPerHourByStage map[string]float64 `json:"host_updates_per_hour_by_stage,omitempty"`
	// ModelStateBytes is the job's parameter state (values and optimizer
	// state): what a checkpoint writes and a restart reads back.
	// StorageBytesPerSecond is what one machine moves to or from durable
	// storage, each machine its shard, all in parallel.
	ModelStateBytes       float64 `json:"model_state_bytes"`
	StorageBytesPerSecond float64 `json:"storage_bytes_per_second"`
	// CheckpointPassUpdates, when positive, is the job's updates per
	// pass, and a checkpoint asked for is taken at the next pass
	// boundary (a multiple of it), as the real coordinator takes it; 0
	// (the default) takes it at once, inside a pass (docs/design/market.md,
	// "The elastic design on processes").
	CheckpointPassUpdates float64 `json:"checkpoint_pass_updates,omitempty"`
	// Hysteresis is the relative gain a stage switch must bring.
	Hysteresis float64 `json:"hysteresis"`
	// Stage is the stage a tiered job is asked for, as the coordinator's
	// --stage: 2 or 3 switches to it whenever it can be formed (a
	// transient machine joins) and to stage 1 when it cannot; 0 (the
	// default) takes the stage of most throughput, with the hysteresis,
	// as the planner does for --stage auto.
	Stage int `json:"stage,omitempty"`
	// Speedup, when positive, says the job runs as processes in
	// compressed time (the real replay) and its own figures above (rates,
	// start, join, switch, drain, revocation, sync, storage) were measured
	// at that --speedup: the processes' seconds are Speedup trace seconds
	// each. AtSpeedup rescales them to another. 0 (the default): real
	// machines, whose figures are trace time.
	Speedup float64 `json:"speedup,omitempty"`
}

// App is one app's work.
type App struct {
	UpdatesPerPass float64 `json:"updates_per_pass"`
}

// PublishedECU holds the EC2 Compute Units AWS published for its
// instance types (the instance type pages of 2013-2017; AWS stopped
// publishing ECUs with the fifth generation): the work rates of the
// default calibration, so that price traces of types other than the
// shipped trace's run without a calibration file. The newer types are
// estimated from their sizes (EstimatedECU) when no calibration file is
// given; the rest (burstable, metal) need one (ecu or updates_per_hour),
// and policies leave markets without a rate alone.
var PublishedECU = map[string]float64{
	"m1.small": 1, "m1.medium": 2, "m1.large": 4, "m1.xlarge": 8,
	"m2.xlarge": 6.5, "m2.2xlarge": 13, "m2.4xlarge": 26,
	"c1.medium": 5, "c1.xlarge": 20, "cc2.8xlarge": 88, "cr1.8xlarge": 88,
	"m3.medium": 3, "m3.large": 6.5, "m3.xlarge": 13, "m3.2xlarge": 26,
	"c3.large": 7, "c3.xlarge": 14, "c3.2xlarge": 28, "c3.4xlarge": 55, "c3.8xlarge": 108,
	"r3.large": 6.5, "r3.xlarge": 13, "r3.2xlarge": 26, "r3.4xlarge": 52, "r3.8xlarge": 104,
	"i2.xlarge": 14, "i2.2xlarge": 27, "i2.4xlarge": 53, "i2.8xlarge": 104,
	"d2.xlarge": 14, "d2.2xlarge": 28, "d2.4xlarge": 56, "d2.8xlarge": 116,
	"g2.2xlarge": 26, "g2.8xlarge": 104,
	"m4.large": 6.5, "m4.xlarge": 13, "m4.2xlarge": 26, "m4.4xlarge": 53.5, "m4.10xlarge": 124.5, "m4.16xlarge": 188,
	"c4.large": 8, "c4.xlarge": 16, "c4.2xlarge": 31, "c4.4xlarge": 62, "c4.8xlarge": 132,
	"r4.large": 7, "r4.xlarge": 13.5, "r4.2xlarge": 27, "r4.4xlarge": 53, "r4.8xlarge": 99, "r4.16xlarge": 195,
}

// ECUPerVCPU is the work rate EstimatedECU gives a virtual CPU: the
// fourth generation's, the last AWS rated (c4 4, m4 3.25, r4 3.4-3.5 ECU a
// vCPU); newer types are faster, so the estimate errs slow.
const ECUPerVCPU = 3.5

// EstimatedECU estimates the work rate of an instance type AWS published
// no ECU for (the fifth generation on: m5, c5, r6i, p3...) from its size,
// which its name gives: AWS's medium has 1 vCPU, large 2, xlarge 4,
// Nxlarge 4N; GCP's predefined types end in their vCPUs (n1-standard-8).
// Burstable sizes (nano, micro, small), metal and custom types are not
// estimated: their vCPUs are not in the name, or not the machine's own.
func EstimatedECU(typ string) (float64, bool) {
	if _, size, ok := strings.Cut(typ, "."); ok { // AWS: family.size
		var vcpus float64
		switch {
		case size == "medium":
			vcpus = 1
		case size == "large":
			vcpus = 2
		case size == "xlarge":
			vcpus = 4
		case strings.HasSuffix(size, "xlarge"):
			n, err := strconv.Atoi(strings.TrimSuffix(size, "xlarge"))
			if err != nil || n < 1 {
				return 0, false
			}
			vcpus = 4 * float64(n)
		default:
			return 0, false
		}
		return vcpus * ECUPerVCPU, true
	}
	if strings.HasPrefix(typ, "custom") {
		return 0, false
	}
	if i := strings.LastIndexByte(typ, '-'); i > 0 { // GCP: family-class-vCPUs
		if n, err := strconv.Atoi(typ[i+1:]); err == nil && n >= 1 {
			return float64(n) * ECUPerVCPU, true
		}
	}
	return 0, false
}

// WithReference returns c with the job on instance type typ instead of
// its reference type: the reference footprint (Machines) and the job's
// parallelism (MaxMachines) scale by the two types' work rates, so that
// the on-demand reference does the same work in the same time on typ.
func (c Calibration) WithReference(typ string) (Calibration, error) {
	was, err := c.Rate(c.ReferenceType)
	if err != nil {
		return c, err
	}
	now, err := c.Rate(typ)
	if err != nil {
		return c, err
	}
	f := was / now
	c.ReferenceType = typ
	c.Machines = max(1, int(math.Round(float64(c.Machines)*f)))
	c.MaxMachines = max(c.Machines, int(math.Round(float64(c.MaxMachines)*f)))
	return c, nil
}

// DefaultCalibration returns the documented placeholders.
func DefaultCalibration() Calibration {
	return Calibration{
		Note: "defaults: placeholders until measured on the real system (docs/design/market.md)",
		// A sparse logistic regression sized so that the reference (32
		// c3.xlarge) runs about 2.5 hours a pass.
		Apps:                 map[string]App{"lr": {UpdatesPerPass: 4e6}},
		UpdatesPerECUHour:    3600, // one update per ECU-second
		ECU:                  maps.Clone(PublishedECU),
		ServerUpdatesPerHour: 8 * 14 * 3600, // a server keeps up with eight c3.xlarge workers
		BackupUpdatesPerHour: 8 * 14 * 3600,
		StreamRatio:          0.1, // the ActivePS aggregates ten pushes into one streamed update
		ReferenceType:        "c3.xlarge",
		Machines:             32,
		ReliableMachines:     2, // a BackupPS chain of two: losing one reliable machine loses nothing
		MaxMachines:          128,
		// AWS's own figure for launch to useful work: "It can take a few
		// minutes to launch an EC2 instance ... Defaults to 300 seconds"
		// (EC2 Auto Scaling, predictive scaling SchedulingBufferTime; ECS
		// managed scaling's instanceWarmupPeriod defaults to 300 s too).
		BootSeconds:         300,
		JoinSeconds:         20,
		SwitchPauseSeconds:  1, // issue 11's bound
		DrainSeconds:        10,
		SyncIntervalSeconds: 1,
		StartSeconds:        0, // not modelled: the first machines' join stands for it
		// The coordinator's default failure timeout (3 s since the
		// eighteenth session), a silent node declared dead within a tick
		// (250 ms) of it after its last heartbeat: a machine the market
		// takes without notice is silent, not a closed connection.
		RevocationSeconds: 3.25,
		Replication:       2,
		// A placeholder model of 1 GiB (values and FTRL state); the
		// checkpoint it gives is under a second (below), so the figures
		// barely depend on it (docs/design/market.md).
		ModelStateBytes: 1 << 30,
		// Amazon S3's documented rate per connection: "Make one concurrent
		// request for each 85–90 MB/s of desired network throughput"
		// (S3 User Guide, performance guidelines); one connection a
		// machine, the low end.
		StorageBytesPerSecond: 85e6,
		Hysteresis:            0.1,
	}
}

func hostStagesOK(m map[string]float64) bool {
	for k, v := range m {
		if (k != "0" && k != "1" && k != "2" && k != "3") || v < 0 {
			return false
		}
	}
	return true
}

// AtSpeedup returns c for the job's processes at speedup x: their own
// times stretch by x/Speedup in trace time and their rates shrink by as
// much. The provider's figures (boot, notice, prices) are trace time and
// do not change. A calibration without a Speedup is returned as is.
func (c Calibration) AtSpeedup(x float64) Calibration {
	if !(c.Speedup > 0) || !(x > 0) || x == c.Speedup {
		return c
	}
	f := x / c.Speedup
	for _, t := range []*float64{&c.StartSeconds, &c.JoinSeconds, &c.SwitchPauseSeconds, &c.DrainSeconds,
		&c.RevocationSeconds, &c.SyncIntervalSeconds} {
		*t *= f
	}
	for _, r := range []*float64{&c.UpdatesPerECUHour, &c.ServerUpdatesPerHour, &c.BackupUpdatesPerHour,
		&c.HostUpdatesPerHour, &c.StorageBytesPerSecond} {
		*r /= f
	}
	c.UpdatesPerHour = scaled(c.UpdatesPerHour, 1/f)
	c.HostUpdatesPerHourByStage = scaled(c.HostUpdatesPerHourByStage, 1/f)
	c.Speedup = x
	return c
}

func scaled(m map[string]float64, f float64) map[string]float64 {
	if m == nil {
		return nil
	}
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = v * f
	}
	return out
}

// ErrNoRate: an instance type the calibration gives no work rate for.
var ErrNoRate = errors.New("no work rate for instance type")

// Rate is a worker's updates per hour on an instance type.
func (c Calibration) Rate(typ string) (float64, error) {
	if r, ok := c.UpdatesPerHour[typ]; ok && r > 0 {
		return r, nil
	}
	if e, ok := c.ECU[typ]; ok && e > 0 {
		return e * c.UpdatesPerECUHour, nil
	}
	return 0, fmt.Errorf("%s: %w (add it to the calibration file's ecu or updates_per_hour)", typ, ErrNoRate)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Boot is the provider's time from a request to a machine that runs.
func (c Calibration) Boot() time.Duration { return seconds(c.BootSeconds) }

// Setup is how long a new machine is paid before it works: its boot and
// the job's handoff to it.
func (c Calibration) Setup() time.Duration { return seconds(c.BootSeconds + c.JoinSeconds) }

// Drain is the handoff away from a leaving machine.
func (c Calibration) Drain() time.Duration { return seconds(c.DrainSeconds) }

// Revocation is what a revocation without enough notice stops the job
// for.
func (c Calibration) Revocation() time.Duration { return seconds(c.RevocationSeconds) }

// K is the chains' length (at least 1).
func (c Calibration) K() int { return max(1, c.Replication) }

// SwitchPause is what a stage switch stops the whole job for.
func (c Calibration) SwitchPause() time.Duration { return seconds(c.SwitchPauseSeconds) }

// Transfer is the time n machines take to write (a checkpoint) or read
// (a restart) the model state to or from durable storage, each its
// shard, in parallel.
func (c Calibration) Transfer(n int) time.Duration {
	return seconds(c.ModelStateBytes / (float64(max(n, 1)) * c.StorageBytesPerSecond))
}

// Validate reports parameters the model cannot run with.
func (c Calibration) Validate() error {
	switch {
	case c.Machines <= 0 || c.ReliableMachines <= 0 || c.MaxMachines < c.Machines:
		return fmt.Errorf("calibration: machines %d, reliable_machines %d, max_machines %d: want positive counts, max at least machines", c.Machines, c.ReliableMachines, c.MaxMachines)
	case c.ServerUpdatesPerHour <= 0 || c.BackupUpdatesPerHour <= 0 || c.StreamRatio <= 0:
		return errors.New("calibration: server_updates_per_hour, backup_updates_per_hour and stream_ratio must be positive")
	case c.BootSeconds < 0 || c.JoinSeconds < 0 || c.SwitchPauseSeconds < 0 || c.DrainSeconds < 0 ||
		c.SyncIntervalSeconds < 0 || c.Hysteresis < 0 || c.StartSeconds < 0 || c.RevocationSeconds < 0 ||
		c.Replication < 0 || c.HostUpdatesPerHour < 0 || c.Speedup < 0 || !hostStagesOK(c.HostUpdatesPerHourByStage) || c.Stage < 0 || c.Stage > 3:
		return errors.New("calibration: times, hysteresis, replication, speedup and host_updates_per_hour must not be negative; stage and host_updates_per_hour_by_stage take stages 0 to 3")
	case !(c.ModelStateBytes > 0) || !(c.StorageBytesPerSecond > 0):
		return errors.New("calibration: model_state_bytes and storage_bytes_per_second must be positive (a checkpoint takes time)")
	}
	_, err := c.Rate(c.ReferenceType)
	return err
}

// LoadCalibration reads a calibration file over the defaults: fields it
// leaves out keep their defaults.
func LoadCalibration(path string) (Calibration, error) {
	c := DefaultCalibration()
	if path == "" {
		return c, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("calibration: %w", err)
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("calibration %s: %w", path, err)
	}
	return c, c.Validate()
}
