package planner

import (
	"errors"
	"math"
	"testing"

	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// calibrationSamples are two stages of 1 reliable and 3 transient
// machines measured for 6 s, built from round figures: every update
// sends 3,000 bytes up and, in stage 3, the heads replicate 1,000 bytes
// of it to one other ActivePS and stream 2,000 bytes and 100 of ledger to
// the one BackupPS; stage 1 costs 5 ms of processor an update, stage 3
// 4 ms; other programs keep one of the host's two processors busy.
func calibrationSamples() []StageSample {
	return []StageSample{{
		Stage: tier.Stage1, Seconds: 6,
		Updates:          tier.ByClass{Reliable: 150, Transient: 450}, // 100/s
		WorkerCPUSeconds: tier.ByClass{Reliable: 0.3, Transient: 0.9},
		HeadCPUSeconds:   1.2, NodeCPUSeconds: 3, HostBusySeconds: 3 + 6, HostProcessors: 2,
		BytesIn: 3000 * 100, Pulls: 100, KeysPulled: 8000, Pushes: 300, Clocks: 100,
		ChainLength: 1, ModelStateBytes: 50_000,
	}, {
		Stage: tier.Stage3, Seconds: 6,
		Updates:          tier.ByClass{Transient: 1200}, // 200/s
		WorkerCPUSeconds: tier.ByClass{Transient: 2.4},
		HeadCPUSeconds:   2.4, NodeCPUSeconds: 4.8, HostBusySeconds: 4.8 + 6, HostProcessors: 2,
		BytesIn:     (3000+1000)*200 + 400_000 + 20_000,
		StreamBytes: 400_000, LedgerBytes: 20_000,
		Pulls: 200, KeysPulled: 16000, Pushes: 600, Clocks: 200,
		ChainLength: 2, BackupCopies: 1, ModelStateBytes: 100_000,
	}}
}

func near(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

// TestCalibrateArithmetic derives every figure from fixed samples.
func TestCalibrateArithmetic(t *testing.T) {
	base := Defaults(1, 3)
	base.LinkBytes = tier.ByClass{} // no link limit: the host decides
	m, err := Calibrate(base, calibrationSamples())
	if err != nil {
		t.Fatal(err)
	}
	near(t, "UpBytes", m.UpBytes, 3000)                            // stage 1 has no chain: all it read came from workers
	near(t, "DownBytes", m.DownBytes, (4000+32000+12000+4800)/100) // replies by the wire format
	near(t, "ChainBytes", m.ChainBytes, 1000)                      // what stage 3's heads read beyond the workers'
	near(t, "StreamBytes", m.StreamBytes, 2000)
	near(t, "LedgerBytes", m.LedgerBytes, 100)
	near(t, "ModelStateBytes", m.ModelStateBytes, 400_000) // the stream measured in one 1 s interval exceeds the stores
	near(t, "WorkerUpdates.Reliable", m.WorkerUpdates.Reliable, 500)
	near(t, "WorkerUpdates.Transient", m.WorkerUpdates.Transient, (450+1200)/(0.9+2.4))
	near(t, "ServerUpdates.Reliable", m.ServerUpdates.Reliable, 600/1.2)
	near(t, "ServerUpdates.Transient", m.ServerUpdates.Transient, 1200/2.4)
	near(t, "HostCores", m.HostCores, 1)
	near(t, "Stages[1].CPUSecondsPerUpdate", m.Stages[tier.Stage1].CPUSecondsPerUpdate, 0.005)
	near(t, "Stages[3].CPUSecondsPerUpdate", m.Stages[tier.Stage3].CPUSecondsPerUpdate, 0.004)
	cs, err := Evaluate(m)
	if err != nil {
		t.Fatal(err)
	}
	// Each stage is held to the host's one free processor at its own
	// processor time per update.
	want := map[tier.Stage]float64{tier.Stage1: 200, tier.Stage3: 250}
	for _, c := range cs {
		if w, ok := want[c.Stage]; ok {
			near(t, "stage "+c.Stage.String()+" updates/s", c.UpdatesPerSecond, w)
			if len(c.Bottleneck) != 1 || c.Bottleneck[0] != "host.cpu" {
				t.Errorf("stage %d bottleneck %v, want host.cpu", c.Stage, c.Bottleneck)
			}
		}
	}
}

// TestCalibrateLinkBound: with the reliable link measured in bytes per
// update, stage 1 is held by the bytes the transient workers push into
// the reliable machine, stage 3 by what the stream and ledger bring it.
func TestCalibrateLinkBound(t *testing.T) {
	base := Defaults(1, 3)
	base.LinkBytes = tier.ByClass{Reliable: 250_000, Transient: 1e9}
	m, err := Calibrate(base, calibrationSamples())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := Evaluate(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		switch c.Stage {
		case tier.Stage1:
			// 3 of 4 workers push 3,000 bytes each into the reliable link.
			near(t, "stage 1", c.UpdatesPerSecond, 250_000/(0.75*3000))
		case tier.Stage3:
			// Stream and ledger, 2,100 bytes an update, into the reliable link.
			near(t, "stage 3", c.UpdatesPerSecond, 250_000/2100.0)
		}
	}
}

// TestCalibrateChainsEverywhere: when every stage measured had chains,
// what heads read is split evenly between the workers and the chain.
func TestCalibrateChainsEverywhere(t *testing.T) {
	m, err := Calibrate(Defaults(1, 3), calibrationSamples()[1:])
	if err != nil {
		t.Fatal(err)
	}
	near(t, "UpBytes", m.UpBytes, 2000)
	near(t, "ChainBytes", m.ChainBytes, 2000)
}

func TestCalibrateRefusesEmptySamples(t *testing.T) {
	if _, err := Calibrate(Defaults(1, 3), nil); !errors.Is(err, ErrCalibration) {
		t.Errorf("no samples: %v, want ErrCalibration", err)
	}
	s := calibrationSamples()
	s[0].Updates = tier.ByClass{}
	if _, err := Calibrate(Defaults(1, 3), s); !errors.Is(err, ErrCalibration) || !errors.Is(err, ErrMeasurements) {
		t.Errorf("no updates: %v, want ErrCalibration", err)
	}
}
