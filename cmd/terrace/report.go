package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// runInfo says which build ran where and when; every report carries it.
type runInfo struct {
	Version string `json:"version"`
	Time    string `json:"time"`
	Host    string `json:"host"`
}

func newRunInfo() runInfo {
	h, _ := os.Hostname()
	return runInfo{Version: version(), Time: time.Now().UTC().Format(time.RFC3339), Host: h}
}

// version is the module version and, for a build from a checkout, its
// commit (with "+dirty" for uncommitted changes).
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " " + rev[:min(12, len(rev))] + dirty
	}
	return v
}

// flagValues returns the flags that apply (keep), as typed JSON values:
// numbers as numbers, booleans as booleans, durations in seconds.
func flagValues(fs *pflag.FlagSet, keep func(name string) bool) map[string]any {
	m := map[string]any{}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Name == "config" || !keep(f.Name) {
			return
		}
		m := keyed{m, strings.ReplaceAll(f.Name, "-", "_")} // one key style: snake_case
		s := f.Value.String()
		switch f.Value.Type() {
		case "int", "int64", "uint64", "uint", "float64", "float32":
			if v, err := strconv.ParseFloat(s, 64); err == nil {
				m.set("", v)
				return
			}
		case "bool":
			if v, err := strconv.ParseBool(s); err == nil {
				m.set("", v)
				return
			}
		case "duration":
			if d, err := time.ParseDuration(s); err == nil {
				m.set("_seconds", d.Seconds())
				return
			}
		}
		m.set("", s)
	})
	return m
}

// keyed sets one flag's value under its snake_case name.
type keyed struct {
	m    map[string]any
	name string
}

func (k keyed) set(suffix string, v any) { k.m[k.name+suffix] = v }

// jobReport is the report of a job, from the coordinator: the job as
// trained, every pass's evaluation, and the workers' own reports.
type jobReport struct {
	runInfo
	Job     *api.Job           `json:"job"`
	Config  map[string]any     `json:"config,omitempty"`
	Passes  []api.PassResult   `json:"passes"`
	Final   map[string]float64 `json:"final,omitempty"`
	Workers any                `json:"workers"`
	// History is the coordinator's samples of the cluster over time
	// (machines by class, stage, dollars), for terrace plot.
	History []api.Sample `json:"history,omitempty"`
}

func newJobReport(st api.JobStatus, cfg map[string]any, workers any) *jobReport {
	r := &jobReport{runInfo: newRunInfo(), Job: st.Job, Config: cfg, Passes: st.Results, Workers: workers}
	if n := len(st.Results); n > 0 {
		r.Final = st.Results[n-1].Metrics
	}
	return r
}
