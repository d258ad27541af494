package sim

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/dataplane/simnet"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/ps"
)

// Scenario is one simulated run: the cluster, the job its workers run, the
// faults, and the invariants checked once training has ended.
type Scenario struct {
	Config
	Workload   Workload
	Faults     Schedule
	Invariants []Invariant
	// Alert, when set, is told of each violation as it is found (the
	// first few of each kind): should the bubble then deadlock, the run
	// is still known.
	Alert func(msg string)
}

// Workload is what every worker of the cluster runs, through its client.
// It records what it pushes, acknowledges, sends and reads in the
// cluster's Book, which is what the invariants read.
type Workload interface {
	Run(ctx context.Context, c *Cluster, w *Node, cl *ps.Client) error
}

// Invariant is a property of a whole run, checked once training has
// ended (or stalled) and every worker has stopped, while the servers
// still run.
type Invariant interface {
	Check(ctx context.Context, c *Cluster) []Violation
}

// Violation is one broken invariant.
type Violation struct {
	Kind   string
	Detail string
	At     time.Duration // fake time since the start
}

func (v Violation) String() string { return v.Kind + ": " + v.Detail }

// The kinds of violation the harness and its invariants report.
const (
	KindExactlyOnce = "acknowledged increments not applied exactly once"
	KindStale       = "staleness bound broken"
	KindLostState   = "partition state did not move with its partition"
	KindStall       = "training did not finish"
	KindFailed      = "a worker failed"
	KindBroken      = "cluster broken"
)

// Kinds lists the harness's kinds of violation in the order reports
// list them.
var Kinds = []string{KindExactlyOnce, KindStale, KindLostState, KindLedger, KindNotice, KindCopies, KindNeedlessRewind, KindRewound, KindStall, KindFailed, KindBroken}

// maxPerKind bounds the violations of one kind a report lists.
const maxPerKind = 3

// Report is what a run found.
type Report struct {
	Seed       uint64
	Violations []Violation
	// Timeline has every fault, every layout the coordinator published,
	// and every worker started, stopped or fenced, in fake time.
	Timeline []string
	// Logs are the nodes' last log lines.
	Logs []string
	// TrainTime is the fake time training took (0 if it stalled).
	TrainTime     time.Duration
	Acked, Reads  int64
	Losses        Losses
	UnknownCopies int // rebuilds of layouts Copies never saw
	// LossBound, with tiers (Config.Stage), is one sync interval's worth
	// of acknowledged increments: the most acknowledged in any window of
	// one interval (Book.MostAckedWithin).
	LossBound int64
	// Reassignments is how many tails of pieces workers took from slow
	// peers (Counters.Reassign).
	Reassignments int64
	// Rewinds, with Config.OnCopiesLost resume, counts the times the
	// cluster went back to a checkpoint, and how many of those were
	// needless by Copies' account.
	Rewinds RewindFigures
	// Ledger, with tiers, is what the BackupPS's loss ledgers counted at
	// fallbacks, as the coordinator summed it (docs/design/tiers.md).
	Ledger api.Loss
}

// Losses is what a run lost where every copy of a slot was gone before a
// new copy was complete: more concurrent failures than k − 1, which no
// system with k copies survives. Expected, not violations.
type Losses struct {
	Slots      []uint64 // slots that lost every copy at least once
	Keys       int      // keys found short of their acknowledged increments
	Increments int64    // acknowledged increments missing from them
}

// Failed reports whether any invariant was broken.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

// Kinds returns the kinds of violation found, each once.
func (r *Report) Kinds() []string {
	var out []string
	for _, v := range r.Violations {
		if !slices.Contains(out, v.Kind) {
			out = append(out, v.Kind)
		}
	}
	return out
}

// Summary lists the violations, at most a few of each kind.
func (r *Report) Summary() string {
	var lines []string
	for _, k := range r.Kinds() {
		n := 0
		for _, v := range r.Violations {
			if v.Kind != k {
				continue
			}
			if n++; n <= maxPerKind {
				lines = append(lines, v.String())
			}
		}
		if n > maxPerKind {
			lines = append(lines, fmt.Sprintf("%s: %d more (see the timeline)", k, n-maxPerKind))
		}
	}
	return strings.Join(lines, "\n")
}

// Detail is the timeline and the last log lines.
func (r *Report) Detail() string {
	return fmt.Sprintf("timeline:\n  %s\nlast log lines:\n  %s", strings.Join(r.Timeline, "\n  "), strings.Join(r.Logs, "\n  "))
}

// Run simulates sc and checks its invariants. It must run inside a
// testing/synctest bubble (synctest.Test), whose fake time it uses, and
// returns only once every goroutine it started has ended.
func Run(ctx context.Context, sc Scenario) *Report {
	cfg := sc.Config.withDefaults()
	ctx, cancel := context.WithCancel(ctx)
	c := &Cluster{cfg: cfg, start: time.Now(), logs: &lineLog{}, workload: sc.Workload, alert: sc.Alert,
		ctx: ctx, cancel: cancel, results: make(chan *Node, 16), peers: ps.NewPeerHub()}
	c.book = NewBook(func(sl uint64) { c.copies.Touch(sl) })
	c.copies = NewCopies(c.book.Mark)
	c.net = simnet.New(simnet.Config{Seed: cfg.Seed, MinDelay: cfg.MinDelay, MaxDelay: cfg.MaxDelay})
	c.log = slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.String("t", c.since()) // fake time since the start
		}
		return a
	}}))
	rep := &Report{Seed: cfg.Seed}
	if cfg.CheckpointEvery > 0 {
		dir, err := os.MkdirTemp("", "terrace-sim-checkpoints-")
		if err != nil {
			cancel()
			rep.Violations = []Violation{{Kind: KindBroken, Detail: fmt.Sprintf("checkpoint directory: %v", err)}}
			return rep
		}
		defer os.RemoveAll(dir)
		c.ckptDir = dir
	}
	if err := c.startNodes(); err != nil {
		c.Violate(KindBroken, "the cluster did not start: %v", err)
	} else {
		rep.TrainTime = c.train(sc.Faults)
		for _, inv := range sc.Invariants {
			for _, v := range inv.Check(ctx, c) {
				c.Violate(v.Kind, "%s", v.Detail)
			}
		}
	}
	rep.Ledger = c.ledgerCount(ctx)
	c.checkReportedLosses()
	// Losses are counted up to here: stopping the cluster kills the rest.
	rep.Losses.Slots = c.copies.Lost()
	rep.UnknownCopies = c.copies.Unknown()
	c.stopNodes()

	rep.Acked, rep.Reads = c.book.Totals()
	if c.cfg.Stage != 0 {
		rep.LossBound = c.book.MostAckedWithin(cmp.Or(c.cfg.SyncInterval, time.Second))
	}
	rep.Reassignments = c.stolen.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	rep.Rewinds = c.rewinds.figures()
	rep.Violations = slices.Clone(c.violations)
	rep.Timeline = slices.Clone(c.timeline)
	rep.Losses.Keys, rep.Losses.Increments = len(c.lossKeys), c.lossIncs
	rep.Logs = c.logs.last(150)
	return rep
}

// startNodes starts the coordinator and the first servers.
func (c *Cluster) startNodes() error {
	if err := c.startCoordinator(); err != nil {
		return err
	}
	// Copies must see every layout, the first ones too.
	go c.watchLayouts()
	ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	for range c.cfg.Servers {
		if _, err := c.StartServer(ctx, ""); err != nil {
			return err
		}
	}
	return nil
}

// train starts the workers and the faults, and waits for training to end;
// it returns the fake time training took, or 0 if it stalled.
func (c *Cluster) train(faults Schedule) time.Duration {
	for range c.cfg.Workers {
		c.StartWorker("")
	}
	fctx, stopFaults := context.WithCancel(c.ctx)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		faults.run(fctx, c)
	}()
	var took time.Duration
	if c.awaitTraining() {
		took = c.Since()
	}
	stopFaults()
	<-faultsDone
	// Workers still running (training stalled) stop as if killed: their
	// pushes in flight stay unconfirmed. The invariants are checked
	// either way.
	c.stopWorkers()
	c.settle()
	return took
}

// settleTimeouts bounds settle's wait, in failure timeouts of the layout.
const settleTimeouts = 5

// settle waits, after training, until the layout names no server that is
// gone (killed, or returned) and no stage switch is under way, for at
// most settleTimeouts failure timeouts of fake time: the invariants then
// read the model the coordinator has settled on. Read at once, the final
// model mixed two layouts: heads a failure not detected yet was about to
// put on standby answered for their slots, and a fallback then abandoned
// what they held, which the loss ledgers rightly counted lost (tiers seed
// 400618, docs/design/sim.md). A layout that keeps a dead server for
// good (the last server on the ring) is read at the bound.
func (c *Cluster) settle() {
	l, err := c.coord.Layout(c.ctx, 0)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, settleTimeouts*l.FailureTimeout())
	defer cancel()
	for !c.settled(l) {
		if l, err = c.coord.Layout(ctx, l.Version); err != nil {
			return
		}
	}
}

// settled reports whether l names no gone server and no switch.
func (c *Cluster) settled(l *layout.Layout) bool {
	if l.Switch != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range l.AllServers() {
		for _, n := range c.servers {
			if n.ID == s.ID && (n.killed || n.done) {
				return false
			}
		}
	}
	return true
}

// stopNodes stops every node, and gives every goroutine (fake) time to
// end: the bubble must be empty when Run returns.
func (c *Cluster) stopNodes() {
	c.cancel()
	c.nodes.Wait()
	c.net.Close()
	time.Sleep(2 * time.Minute)
}
