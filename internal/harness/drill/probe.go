package drill

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"time"
)

// ErrNoCPUTimes: this system does not tell processes' processor times
// (they come from /proc on Linux).
var ErrNoCPUTimes = errors.New("drill: processor times are not available on this system")

// NodeSample is one node of a Cluster at a moment, for a calibration
// (`terrace plan --measure`): the processor time it has used so far and,
// for a server, its last statistics line and when the line came.
type NodeSample struct {
	Name    string `json:"name"`
	Role    Role   `json:"role"`
	Machine string `json:"machine,omitempty"`
	Class   Role   `json:"class,omitempty"`
	// Worker is a worker's number (its audit log's), -1 for other roles.
	Worker int `json:"worker"`
	// CPUSeconds is its user and system time so far; -1 when unknown
	// (exited, or ErrNoCPUTimes).
	CPUSeconds float64         `json:"cpu_seconds"`
	Stats      json.RawMessage `json:"stats,omitempty"`
	StatsAt    time.Time       `json:"stats_at,omitzero"`
	Exited     bool            `json:"exited,omitempty"`
}

// Sample reads every node's processor time and last statistics now.
func (c *Cluster) Sample() []NodeSample {
	c.mu.Lock()
	defer c.mu.Unlock()
	workers := map[*proc]int{}
	for i, w := range c.d.workers {
		workers[w] = i
	}
	var out []NodeSample
	for _, p := range c.d.sup.procs {
		s := NodeSample{Name: p.name, Role: p.role, Machine: p.machine, Class: p.class, Worker: -1, CPUSeconds: -1, Exited: p.done()}
		if i, ok := workers[p]; ok {
			s.Worker = i
		}
		if !s.Exited {
			if cpu, err := processCPUSeconds(p.pid()); err == nil {
				s.CPUSeconds = cpu
			}
		}
		p.mu.Lock()
		if p.lastStats != "" {
			s.Stats, s.StatsAt = json.RawMessage(p.lastStats), p.statsAt
		}
		p.mu.Unlock()
		out = append(out, s)
	}
	return out
}

// AuditLogs reads the audit log of every worker that has written one
// (ClusterConfig.Audit), by worker number.
func (c *Cluster) AuditLogs() map[int]*WorkerLog {
	c.mu.Lock()
	n := len(c.d.workers)
	c.mu.Unlock()
	out := map[int]*WorkerLog{}
	for i := range n {
		l, err := ReadAuditLog(filepath.Join(c.d.cfg.RunDir, workerFile(i, ".audit")))
		if err == nil {
			out[i] = l
		}
	}
	return out
}

// HostCPU returns the processor time every program on this host has used
// since it started (busy: neither idle nor waiting for I/O), in seconds,
// and its number of processors.
func HostCPU() (busySeconds float64, processors int, err error) {
	return hostCPU()
}
