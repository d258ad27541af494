package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/internal/harness/straggle"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// straggleFlags are train's flags for straggler injection and rapid
// reassignment (docs/design/stragglers.md).
type straggleFlags struct {
	pattern  string
	reassign bool
	work     time.Duration
	parsed   straggle.Pattern
}

// register adds the flags to fs; note ends --straggle's help (train's:
// it turns the audit on).
func (s *straggleFlags) register(fs *pflag.FlagSet, note string) {
	fs.StringVar(&s.pattern, "straggle", "", "slow workers on purpose, reproducibly from --seed: one:4x, random:3x, machine:5x@2s-6s or powerlaw:1.5"+note)
	fs.DurationVar(&s.work, "straggle-work", 0, "emulated compute per example, slowed with the rest, so that workers sharing this machine's cores behave as if each had its own (e.g. 100us)")
	fs.BoolVar(&s.reassign, "reassign", false, "rapid reassignment: workers tell peers their progress and take the tails of slow peers' pieces")
}

// check parses the pattern. With --processes the workers' processes
// slow themselves and tell their peers through the network
// (cmd/terrace/peers.go).
func (s *straggleFlags) check(d *drillFlags) error {
	p, err := straggle.Parse(s.pattern)
	if err != nil {
		return err
	}
	s.parsed = p
	if p.Kind != straggle.None {
		d.audit = true
	}
	return nil
}

// wrap slows and helps job's workers as the flags say; nil run when
// neither is asked for.
func (s *straggleFlags) wrap(job node.Job, seed uint64) (node.Job, *straggle.Run) {
	if s.parsed.Kind == straggle.None && !s.reassign && s.work == 0 {
		return job, nil
	}
	run := &straggle.Run{}
	return straggle.Job(job, straggle.Options{Pattern: s.parsed, Seed: seed, Reassign: s.reassign, Hub: ps.NewPeerHub(), Start: time.Now(), Work: s.work}, run), run
}

// straggleReport is what train's report adds with --straggle or --reassign.
type straggleReport struct {
	Straggle           string `json:"straggle,omitempty"`
	Reassignments      int64  `json:"reassignments"`
	ExamplesReassigned int64  `json:"examples_reassigned"`
	SplitsRefused      int64  `json:"splits_refused"`
}

func (s *straggleFlags) report(run *straggle.Run) *straggleReport {
	if run == nil {
		return nil
	}
	st := run.Stats()
	return &straggleReport{Straggle: s.parsed.String(), Reassignments: st.Reassignments, ExamplesReassigned: st.ExamplesReassigned, SplitsRefused: st.Refused}
}
