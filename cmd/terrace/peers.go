package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/internal/harness/straggle"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/internal/process/peernet"
	"github.com/terrace-ml/terrace/ps"
)

// peerFlags are a worker process's flags for straggler injection and
// rapid reassignment across processes: the worker listens for its peers'
// progress on a peer port announced in its join
// (docs/design/stragglers.md).
type peerFlags struct {
	straggleFlags
	addr string
}

func (p *peerFlags) register(fs *pflag.FlagSet) {
	p.straggleFlags.register(fs, " (give every worker of the job the same: each slows itself when the pattern picks its rank)")
	fs.StringVar(&p.addr, "peer-addr", "", "with --reassign: where to listen for peers' progress messages (port 0 on the address this worker reaches the coordinator from if empty)")
}

// check parses the flags, before the worker reaches for anything.
func (p *peerFlags) check() error {
	pat, err := straggle.Parse(p.pattern)
	if err != nil {
		return err
	}
	p.parsed = pat
	if p.addr != "" && !p.reassign {
		return fmt.Errorf("--peer-addr needs --reassign")
	}
	if p.work < 0 {
		return fmt.Errorf("--straggle-work %v: must be >= 0", p.work)
	}
	return nil
}

// start, with --reassign, opens the peer endpoint and announces it in
// cfg; it returns job slowed and helped as the flags say (check must have
// run), and what to call once the worker is done.
func (p *peerFlags) start(ctx context.Context, cfg *node.WorkerConfig, seed uint64, job node.Job) (node.Job, func(), error) {
	pat := p.parsed
	if pat.Kind == straggle.None && !p.reassign && p.work == 0 {
		return job, func() {}, nil
	}
	var err error
	var ep *peernet.Endpoint
	if p.reassign {
		addr := p.addr
		if addr == "" {
			first, _, _ := strings.Cut(cfg.Coordinator, ",")
			ip, err := peernet.LocalIP(first)
			if err != nil {
				return nil, nil, fmt.Errorf("--peer-addr: none given, and %w", err)
			}
			addr = net.JoinHostPort(ip, "0")
		}
		ep, err = peernet.Listen(ctx, addr, peernet.Options{Network: cfg.Network, Logger: cfg.Logger})
		if err != nil {
			return nil, nil, fmt.Errorf("--peer-addr: %w", err)
		}
		first, _, _ := strings.Cut(cfg.Coordinator, ",")
		if cfg.PeerAddr, err = ep.Announced(first); err != nil {
			ep.Close()
			return nil, nil, fmt.Errorf("--peer-addr: %w", err)
		}
		cfg.Metrics.Extra = append(cfg.Metrics.Extra, ep.Collector())
	}
	wrapped := func(ctx context.Context, c *ps.Client) (any, error) {
		if pat.Kind != straggle.None || p.work > 0 {
			c.Pace(straggle.NewPacer(pat, seed, c, time.Now()).WithWork(p.work))
		}
		if note := slowedWorker(pat, seed, c.Rank(), c.Layout().Workers); note != "" {
			cfg.Logger.Warn(note, "straggle", pat.String(), "rank", c.Rank())
		}
		if ep != nil {
			ep.Bind(c.Rank(), peernet.FromLayout(c.Layout))
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if err := c.Reassign(rctx, ps.Reassign{Peers: ep}); err != nil {
				return nil, err
			}
		}
		rep, err := job(ctx, c)
		if err != nil || rep == nil {
			return rep, err
		}
		var peers *peernet.Stats
		if ep != nil {
			s := ep.Stats()
			peers = &s
		}
		return withReassign(rep, c.ReassignStats(), peers)
	}
	done := func() {
		if ep != nil {
			ep.Close()
		}
	}
	return wrapped, done, nil
}

// withReassign adds reassignment's and the peer endpoint's counts to a
// worker's report, under "reassign" and "peer_messages".
func withReassign(rep any, st ps.ReassignStats, peers *peernet.Stats) (any, error) {
	b, err := json.Marshal(rep)
	if err != nil {
		return nil, fmt.Errorf("worker report: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return rep, nil // not an object: left as the app made it
	}
	m["reassign"] = st
	if peers != nil {
		m["peer_messages"] = peers
	}
	return m, nil
}

// slowedWorker says, for the worker of rank among workers that a pattern
// slowing one worker (one:, machine:) picks, that it is slowed on purpose;
// "" for every other worker and pattern. Every worker process was silent,
// and which was the straggler had to be read off their rates.
func slowedWorker(p straggle.Pattern, seed uint64, rank, workers int) string {
	if (p.Kind != straggle.One && p.Kind != straggle.Machine) || rank != straggle.Victim(seed, workers) {
		return ""
	}
	return "this worker is the one --straggle slows, on purpose"
}

// straggleArgs passes train's straggler and reassignment flags on to the
// workers of --processes.
func straggleArgs(fs *pflag.FlagSet) []string {
	var args []string
	for _, name := range []string{"straggle", "straggle-work", "reassign"} {
		if f := fs.Lookup(name); f != nil && f.Changed {
			args = append(args, "--"+name+"="+f.Value.String())
		}
	}
	return args
}

// workersStraggle sums the workers' reassignment counts of a --processes
// run of train (flags fs); nil unless --straggle or --reassign was given.
func workersStraggle(fs *pflag.FlagSet, reps map[int]json.RawMessage) *straggleReport {
	pattern, _ := fs.GetString("straggle")
	reassign, _ := fs.GetBool("reassign")
	pat, err := straggle.Parse(pattern)
	if err != nil || pat.Kind == straggle.None && !reassign {
		return nil
	}
	r := &straggleReport{Straggle: pat.String()}
	for _, raw := range reps {
		var w struct {
			Reassign ps.ReassignStats `json:"reassign"`
		}
		if json.Unmarshal(raw, &w) == nil {
			r.Reassignments += w.Reassign.Reassignments
			r.ExamplesReassigned += w.Reassign.ExamplesReassigned
			r.SplitsRefused += w.Reassign.Refused
		}
	}
	return r
}
