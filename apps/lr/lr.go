package lr

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/metrics"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// Config configures a training run.
type Config struct {
	Train, Test string
	Epochs      int
	// Batch is the number of examples in one worker's minibatch.
	Batch       int
	Rule        table.Rule
	Consistency table.Consistency
	Encoding    table.Encoding
	// Significance turns on the significantly-modified push filter.
	Significance float32
	Seed         uint64
	// Progress, when set, is called by rank 0 after every epoch.
	Progress func(EpochStats)

	// Audit makes every worker keep an account of its work in two tables
	// of its own, independent of the model: with every minibatch it also
	// pushes +1 to one of its AuditKeys in AuditTable and +1 to key r of
	// TrainedTable for each training row r of the batch (both sum-rule ASP
	// tables), and it counts the AuditTable increments that the servers
	// acknowledged (Report.AuditAcked). Comparing that count with the sum
	// of the worker's keys, and the TrainedTable counts with the number of
	// epochs, tells whether acknowledged updates were lost and which
	// examples were trained more or fewer times than asked. Off by default.
	Audit bool
	// OnAuditAck, when set with Audit, is called from the worker's
	// goroutine each time the worker sees an AuditTable push acknowledged,
	// with its rank, the count so far and the time it saw it. Acks are
	// seen once per minibatch step (and while waiting for pushes), so the
	// time is at most one step late. An error stops training.
	OnAuditAck func(rank int, acked int64, at time.Time) error
}

// DefaultConfig is the configuration `terrace train --app lr` starts from.
func DefaultConfig() Config {
	return Config{
		Epochs:      10,
		Batch:       100,
		Rule:        table.Rule{Kind: table.FTRL, LR: 0.1, Beta: 1, L1: 0.001, L2: 0.01},
		Consistency: table.Consistency{Model: table.SSP, Staleness: 2},
		Seed:        1,
	}
}

// EpochStats is rank 0's view after one epoch.
type EpochStats struct {
	Epoch        int     `json:"epoch"`
	Seconds      float64 `json:"seconds"`
	TrainLogLoss float64 `json:"train_logloss"`
	TestAccuracy float64 `json:"test_accuracy"`
	TestLogLoss  float64 `json:"test_logloss"`
	TestAUC      float64 `json:"test_auc"`
}

// Report is one worker's result; test metrics are rank 0's.
type Report struct {
	App               string       `json:"app"`
	Rank              int          `json:"rank"`
	Examples          int64        `json:"examples"`
	Seconds           float64      `json:"seconds"`
	ExamplesPerSecond float64      `json:"examples_per_second"`
	TestAccuracy      float64      `json:"test_accuracy,omitempty"`
	TestLogLoss       float64      `json:"test_logloss,omitempty"`
	TestAUC           float64      `json:"test_auc,omitempty"`
	Refused           int64        `json:"refused_non_finite"`
	Epochs            []EpochStats `json:"epochs,omitempty"`
	// AuditAcked is, with Config.Audit, how many of this worker's
	// AuditTable increments the servers acknowledged.
	AuditAcked int64 `json:"audit_acked,omitempty"`
}

// TableName is the weight table's name.
const TableName = "lr.weights"

// The audit tables (Config.Audit): AuditTable counts each worker's
// minibatch pushes under its AuditKeys; TrainedTable counts how often each
// training row (key: its 0-based row number in Config.Train) was trained.
const (
	AuditTable   = "lr.audit"
	TrainedTable = "lr.trained"
)

// AuditSpec is the spec of both audit tables: counters that the servers
// add to (sum rule), never waiting on clocks (ASP).
func AuditSpec(name string) table.Spec {
	return table.Spec{Name: name, Width: 1, Rule: table.Rule{Kind: table.Sum}, Consistency: table.Consistency{Model: table.ASP}}
}

// progressEvery is how many minibatches pass between progress reports: what
// a dead worker's successor repeats at most.
const progressEvery = 8

// Key 0 holds the bias; feature f is key f+1.
func featureKey(f uint64) uint64 { return f + 1 }

// Run trains on this worker's partitions of cfg.Train and, on rank 0,
// evaluates on cfg.Test after every epoch.
func Run(ctx context.Context, c *ps.Client, cfg Config) (*Report, error) {
	train, err := data.ReadLIBSVM(cfg.Train)
	if err != nil {
		return nil, fmt.Errorf("lr: %w", err)
	}
	var test *data.Sparse
	if c.Rank() == 0 && cfg.Test != "" {
		if test, err = data.ReadLIBSVM(cfg.Test); err != nil {
			return nil, fmt.Errorf("lr: %w", err)
		}
	}
	tbl, err := c.CreateTable(ctx, table.Spec{Name: TableName, Width: 1, Rule: cfg.Rule, Consistency: cfg.Consistency, Encoding: cfg.Encoding, Significance: cfg.Significance})
	if err != nil {
		return nil, fmt.Errorf("lr: %w", err)
	}
	parts := data.Partition(train.Len(), c.Layout().Partitions)
	nkeys := featureKey(train.NumFeatures)
	if test != nil {
		nkeys = max(nkeys, featureKey(test.NumFeatures))
	}
	w := newWorker(train, nkeys, tbl, cfg.Consistency.Bound() < 0)
	w.clocked = cfg.Consistency.Model != table.ASP
	if cfg.Audit {
		if w.audit, err = newAuditor(ctx, c, cfg.OnAuditAck); err != nil {
			return nil, err
		}
	}
	rep := &Report{App: "lr", Rank: c.Rank()}
	start := time.Now()
	for e := range cfg.Epochs {
		epochStart := time.Now()
		var loss float64
		n := 0
		// Partitions are leased: a dead or drained worker's partition is
		// finished by another from its last recorded offset, and the loop
		// returns when every partition of the epoch is trained, which is
		// the epoch's barrier.
		err := c.EachPartition(ctx, e, func(ctx context.Context, l *ps.Lease) error {
			order := parts[l.Partition].Order(cfg.Seed, e)
			var batches [][]int
			for off := l.Offset; off < len(order); off += cfg.Batch {
				batches = append(batches, order[off:min(off+cfg.Batch, len(order))])
			}
			bl, bn, err := w.partition(ctx, c, l, batches, len(order))
			loss += bl
			n += bn
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("lr: epoch %d: %w", e+1, err)
		}
		rep.Examples += int64(n)
		if err := tbl.Flush().Wait(ctx); err != nil {
			return nil, fmt.Errorf("lr: flush: %w", err)
		}
		if test != nil {
			st := EpochStats{Epoch: e + 1, Seconds: time.Since(epochStart).Seconds(), TrainLogLoss: loss / float64(max(n, 1))}
			if st.TestAccuracy, st.TestLogLoss, st.TestAUC, err = Evaluate(ctx, tbl, test, nkeys); err != nil {
				return nil, err
			}
			rep.Epochs = append(rep.Epochs, st)
			if cfg.Progress != nil {
				cfg.Progress(st)
			}
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.ExamplesPerSecond = float64(rep.Examples) / rep.Seconds
	rep.Refused = tbl.Refused()
	if w.audit != nil {
		rep.AuditAcked = w.audit.acked
	}
	if n := len(rep.Epochs); n > 0 {
		last := rep.Epochs[n-1]
		rep.TestAccuracy, rep.TestLogLoss, rep.TestAUC = last.TestAccuracy, last.TestLogLoss, last.TestAUC
	}
	if err := c.Finish().Wait(ctx); err != nil {
		return nil, err
	}
	return rep, nil
}

// Evaluate pulls the whole model and scores test.
func Evaluate(ctx context.Context, tbl *ps.Table, test *data.Sparse, nkeys uint64) (acc, logloss, auc float64, err error) {
	model := make([]float32, nkeys)
	if err := tbl.PullRange(keyspace.Range{Lo: 0, Hi: nkeys}, model).Wait(ctx); err != nil {
		return 0, 0, 0, fmt.Errorf("lr: pull model: %w", err)
	}
	probs := make([]float64, test.Len())
	for i := range probs {
		keys, vals, _ := test.Row(i)
		z := float64(model[0])
		for j, k := range keys {
			if fk := featureKey(k); fk < nkeys {
				z += float64(model[fk]) * float64(vals[j])
			}
		}
		probs[i] = sigmoid(z)
	}
	scores := probs
	return metrics.Accuracy(test.Labels, probs), metrics.LogLoss(test.Labels, probs), metrics.AUC(test.Labels, scores), nil
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// worker holds one worker's scratch space for minibatches.
type worker struct {
	train    *data.Sparse
	tbl      *ps.Table
	prefetch bool
	// clocked is false under ASP, whose reads never wait on clocks, so a
	// clock message per minibatch would be pure overhead.
	clocked bool
	// pos maps a key to its index in the current batch's key list; every
	// key a batch reads is set before the batch uses it. stamp marks the
	// keys already collected for the batch being prepared (gen), so that
	// only distinct keys are sorted.
	pos   []int32
	stamp []uint32
	gen   uint32
	// audit is nil unless Config.Audit.
	audit *auditor
}

func newWorker(train *data.Sparse, nkeys uint64, tbl *ps.Table, prefetch bool) *worker {
	return &worker{train: train, tbl: tbl, prefetch: prefetch, pos: make([]int32, nkeys), stamp: make([]uint32, nkeys)}
}

// batch is one minibatch's key list and weights.
type batch struct {
	rows []int
	keys []uint64
	w    []float32
	pull *ps.Future
}

func (wk *worker) prepare(rows []int) *batch {
	wk.gen++
	b := &batch{rows: rows, keys: []uint64{0}}
	wk.stamp[0] = wk.gen
	for _, r := range rows {
		keys, _, _ := wk.train.Row(r)
		for _, k := range keys {
			if fk := featureKey(k); wk.stamp[fk] != wk.gen {
				wk.stamp[fk] = wk.gen
				b.keys = append(b.keys, fk)
			}
		}
	}
	slices.Sort(b.keys)
	b.w = make([]float32, len(b.keys))
	b.pull = wk.tbl.Pull(b.keys, b.w)
	return b
}

// partition trains the minibatches of a leased partition, which end at
// offset size; it returns the summed training log loss and the number of
// examples. Under ASP the next batch's weights are fetched while this one
// computes. Every progressEvery minibatches it records, without waiting,
// the offset up to which every push is acknowledged, so that the push
// pipeline never drains; on a drain it waits for its pushes and records the
// exact offset.
func (wk *worker) partition(ctx context.Context, c *ps.Client, l *ps.Lease, batches [][]int, size int) (float64, int, error) {
	type sent struct {
		end  int // partition offset after this batch
		push *ps.Future
	}
	var loss float64
	n := 0
	var next *batch
	var inflight []sent
	off := l.Offset
	reported := make(chan error, 1)
	reporting := false
	for s, rows := range batches {
		cur := next
		if cur == nil {
			cur = wk.prepare(rows)
		}
		next = nil
		if err := cur.pull.Wait(ctx); err != nil {
			return 0, 0, err
		}
		if wk.prefetch && s+1 < len(batches) {
			next = wk.prepare(batches[s+1])
		}
		grad, bl := wk.gradient(cur)
		loss += bl
		n += len(rows)
		off += len(rows)
		inflight = append(inflight, sent{off, wk.tbl.Push(cur.keys, grad)})
		if wk.audit != nil {
			wk.audit.push(rows)
		}
		if wk.clocked {
			c.Tick()
		}
		// Keep at most 8 pushes in flight, and learn how far every push
		// is acknowledged.
		if len(inflight) > 8 {
			if err := inflight[0].push.Wait(ctx); err != nil {
				return 0, 0, err
			}
		}
		done := 0
		for done < len(inflight) && isDone(inflight[done].push) {
			if err := inflight[done].push.Err(); err != nil {
				return 0, 0, err
			}
			done++
		}
		acked := l.Offset
		if done > 0 {
			acked = inflight[done-1].end
			inflight = inflight[done:]
		}
		if wk.audit != nil {
			if err := wk.audit.collect(ctx, false); err != nil {
				return 0, 0, err
			}
		}
		if c.Draining() {
			break
		}
		if s%progressEvery == progressEvery-1 && done > 0 {
			select {
			case err := <-reported:
				reporting = false
				if err != nil {
					return 0, 0, err
				}
			default:
			}
			if !reporting {
				reporting = true
				go func(at int) { reported <- l.Progress(ctx, at) }(acked)
			}
		}
	}
	if next != nil {
		next.pull.Wait(ctx)
	}
	for _, f := range inflight {
		if err := f.push.Wait(ctx); err != nil {
			return 0, 0, err
		}
	}
	if wk.audit != nil {
		if err := wk.audit.collect(ctx, true); err != nil {
			return 0, 0, err
		}
	}
	if reporting {
		if err := <-reported; err != nil {
			return 0, 0, err
		}
	}
	if c.Draining() && off < size {
		if err := l.Progress(ctx, off); err != nil {
			return 0, 0, err
		}
		return loss, n, ps.ErrDrained
	}
	return loss, n, l.Complete(ctx, size)
}

func isDone(f *ps.Future) bool {
	select {
	case <-f.Done():
		return true
	default:
		return false
	}
}

// gradient returns the minibatch's mean log-loss gradient on cur's keys and
// its summed log loss.
func (wk *worker) gradient(cur *batch) ([]float32, float64) {
	for i, k := range cur.keys {
		wk.pos[k] = int32(i)
	}
	grad := make([]float32, len(cur.keys))
	var loss float64
	for _, r := range cur.rows {
		keys, vals, y := wk.train.Row(r)
		z := float64(cur.w[0])
		for j, k := range keys {
			z += float64(cur.w[wk.pos[featureKey(k)]]) * float64(vals[j])
		}
		p := sigmoid(z)
		if y > 0 {
			loss -= math.Log(max(p, 1e-15))
		} else {
			loss -= math.Log(max(1-p, 1e-15))
		}
		g := float32(p - float64(y))
		grad[0] += g
		for j, k := range keys {
			grad[wk.pos[featureKey(k)]] += g * vals[j]
		}
	}
	scale := 1 / float32(max(len(cur.rows), 1))
	for i := range grad {
		grad[i] *= scale
	}
	return grad, loss
}
