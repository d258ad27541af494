package jobsim

import "strconv"

// Flow is the stand-in for issue 11's planner: each stage is a series
// flow (workers' compute, then the servers that ingest it, then the
// BackupPS that the ActivePS streams to), and its throughput is the least
// of its cuts. The planner replaces it with measured capacities; it has
// the same inputs.
//
// Host[s], when positive, caps stage s: the machines are processes on one
// host that share its processors (Calibration.HostUpdatesPerHour).
type Flow struct {
	Server, Backup, Stream float64
	Host                   [4]float64
}

// FlowOf returns the calibration's flow.
func FlowOf(c Calibration) Flow {
	f := Flow{Server: c.ServerUpdatesPerHour, Backup: c.BackupUpdatesPerHour, Stream: c.StreamRatio}
	for s := range f.Host {
		f.Host[s] = c.HostUpdatesPerHour
		if v, ok := c.HostUpdatesPerHourByStage[strconv.Itoa(s)]; ok && v > 0 {
			f.Host[s] = v
		}
	}
	return f
}

// Mix is the machines that work: counts and summed worker rates by class.
// Counts are fractional when a policy weighs machines by their expected
// uptime.
type Mix struct {
	Reliable, Transient         float64
	ReliableRate, TransientRate float64
}

// Stage returns the updates per hour of stage 1, 2 or 3 (0: no tiers,
// every machine a server and a worker).
func (f Flow) Stage(stage int, m Mix) float64 {
	r := f.stage(stage, m)
	if stage >= 0 && stage < len(f.Host) && f.Host[stage] > 0 {
		r = min(r, f.Host[stage])
	}
	return r
}

func (f Flow) stage(stage int, m Mix) float64 {
	r, t := m.Reliable, m.Transient
	all := m.ReliableRate + m.TransientRate
	switch stage {
	case 0:
		return min(all, (r+t)*f.Server/2)
	case 1:
		return min(all, r*f.Backup/2)
	case 2:
		if t == 0 {
			return 0
		}
		return min(all, t*f.Server, r*f.Backup/(2*f.Stream))
	case 3:
		if t == 0 {
			return 0
		}
		return min(m.TransientRate, t*f.Server, r*f.Backup/f.Stream)
	}
	return 0
}

// Best returns the tier stage with the most throughput, and that
// throughput.
func (f Flow) Best(m Mix) (int, float64) {
	best, rate := 1, f.Stage(1, m)
	for s := 2; s <= 3; s++ {
		if r := f.Stage(s, m); r > rate {
			best, rate = s, r
		}
	}
	return best, rate
}

// BestRate is Best's throughput alone, in the form policies consume.
func (f Flow) BestRate(reliable, transient, reliableRate, transientRate float64) float64 {
	_, r := f.Best(Mix{reliable, transient, reliableRate, transientRate})
	return r
}
