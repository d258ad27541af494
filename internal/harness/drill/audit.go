package drill

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// The audit tables: AuditTable counts each worker's minibatches under its
// AuditKeys; TrainedTable counts how often each training row (key: the
// row number the partition loop hands the app) was trained. They belong
// to the audit, not to any app, so that every app can be drilled.
const (
	AuditTable   = "terrace.audit"
	TrainedTable = "terrace.trained"
)

// AuditSpec is the spec of both audit tables: counters that the servers
// add to (sum rule), never waiting on clocks (ASP).
func AuditSpec(name string) table.Spec {
	return table.Spec{Name: name, Width: 1, Rule: table.Rule{Kind: table.Sum}, Consistency: table.Consistency{Model: table.ASP}}
}

// AuditSpread is how many AuditTable keys a worker spreads its count
// over, one per minibatch in turn. Each key lies in a slot of its own
// (keyspace slots are 64 keys), so the count crosses many servers' chains
// and a lost update shows wherever it happens; one key would live on one
// chain and see only that chain's losses.
const AuditSpread = 64

// AuditKey is the i-th (mod AuditSpread) AuditTable key of worker rank.
func AuditKey(rank, i int) uint64 {
	return (uint64(rank)*AuditSpread + uint64(i%AuditSpread)) * 64
}

// auditRank is the worker rank whose count AuditTable key k holds (the
// inverse of AuditKey).
func auditRank(k uint64) int { return int(k / 64 / AuditSpread) }

// auditQueue bounds the AuditTable pushes whose acknowledgement the
// auditor has not yet counted; the partition loop's window keeps far
// fewer outstanding.
const auditQueue = 64

// Auditor is a worker's side of the audit, whatever the app: a
// ps.Observer of the partition loop that, with every minibatch, pushes +1
// to one of the worker's AuditKeys and +1 to the TrainedTable key of each
// of the minibatch's rows, and counts the AuditTable increments the
// servers acknowledge. The loop records a minibatch as trained only once
// these pushes are acknowledged too, so a row recorded as trained is
// counted.
type Auditor struct {
	audit, trained *ps.Table
	keys           [AuditSpread][1]uint64 // the worker's AuditKeys, each a one-key list
	step           int
	one            []float32 // [1]: the +1 of an AuditTable push
	ones           []float32 // grows to the largest minibatch; read only once shared
	queue          chan *ps.Future
	stopped        chan struct{}

	mu    sync.Mutex
	acked int64
	err   error // from onAck: stops training
}

// StartAudit creates the audit tables, makes c's partition loops report
// to a new Auditor, and calls onAck (if not nil) from the Auditor's own
// goroutine each time one of the worker's AuditTable increments is
// acknowledged, with the worker's rank, the count so far and the time the
// acknowledgement arrived. An error from onAck stops training. Close the
// Auditor when the job is done.
func StartAudit(ctx context.Context, c *ps.Client, onAck func(rank int, acked int64, at time.Time) error) (*Auditor, error) {
	a := &Auditor{one: []float32{1}, queue: make(chan *ps.Future, auditQueue), stopped: make(chan struct{})}
	for i := range a.keys {
		a.keys[i][0] = AuditKey(c.Rank(), i)
	}
	var err error
	if a.audit, err = c.CreateTable(ctx, AuditSpec(AuditTable)); err != nil {
		return nil, fmt.Errorf("drill: audit: %w", err)
	}
	if a.trained, err = c.CreateTable(ctx, AuditSpec(TrainedTable)); err != nil {
		return nil, fmt.Errorf("drill: audit: %w", err)
	}
	go a.count(ctx, c.Rank(), onAck)
	c.Observe(a)
	return a, nil
}

// Observe pushes one minibatch's audit increments: +1 for the worker, +1
// for every row trained. The slices sent are never written again.
func (a *Auditor) Observe(ctx context.Context, b ps.Batch) (*ps.Future, error) {
	a.mu.Lock()
	err := a.err
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	counted := a.audit.Push(a.keys[a.step%AuditSpread][:], a.one)
	a.step++
	keys := make([]uint64, len(b.Rows))
	for i, r := range b.Rows {
		keys[i] = uint64(r)
	}
	slices.Sort(keys)
	if len(a.ones) < len(keys) {
		a.ones = make([]float32, len(keys))
		for i := range a.ones {
			a.ones[i] = 1
		}
	}
	trained := a.trained.Push(keys, a.ones[:len(keys)])
	select {
	case a.queue <- counted:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return ps.All(counted, trained), nil
}

// count counts the acknowledged AuditTable pushes in the order they were
// sent. A push that fails, or that has not completed when ctx ends, is
// not counted: the count can only fall short of what the servers hold.
func (a *Auditor) count(ctx context.Context, rank int, onAck func(int, int64, time.Time) error) {
	defer close(a.stopped)
	for f := range a.queue {
		if !acked(ctx, f) {
			continue
		}
		now := time.Now()
		a.mu.Lock()
		a.acked++
		n := a.acked
		a.mu.Unlock()
		if onAck == nil {
			continue
		}
		if err := onAck(rank, n, now); err != nil {
			a.mu.Lock()
			a.err = fmt.Errorf("drill: audit: %w", err)
			a.mu.Unlock()
		}
	}
}

// acked waits for f until ctx ends and reports whether it succeeded; a
// future already complete counts even after ctx has ended.
func acked(ctx context.Context, f *ps.Future) bool {
	select {
	case <-f.Done():
	default:
		select {
		case <-f.Done():
		case <-ctx.Done():
			return false
		}
	}
	return f.Err() == nil
}

// Close stops the Auditor, once it has counted every acknowledgement of
// the pushes it sent, and returns the count.
func (a *Auditor) Close() int64 {
	close(a.queue)
	<-a.stopped
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked
}

// ReadAudit pulls the audit tables' counts: for each worker rank in
// [0, workers) the sum of its AuditTable keys, and for each training row in
// [0, rows) how often it was trained.
func ReadAudit(ctx context.Context, c *ps.Client, workers, rows int) (perWorker, perRow []float32, err error) {
	open := func(name string) (*ps.Table, error) {
		t, err := c.Table(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("drill: audit: %w", err)
		}
		return t, nil
	}
	audit, err := open(AuditTable)
	if err != nil {
		return nil, nil, err
	}
	trained, err := open(TrainedTable)
	if err != nil {
		return nil, nil, err
	}
	keys := make([]uint64, 0, workers*AuditSpread)
	for r := range workers {
		for i := range AuditSpread {
			keys = append(keys, AuditKey(r, i))
		}
	}
	counts := make([]float32, len(keys))
	if len(keys) > 0 {
		if err := audit.Pull(keys, counts).Wait(ctx); err != nil {
			return nil, nil, fmt.Errorf("drill: audit: pull %s: %w", AuditTable, err)
		}
	}
	perWorker = make([]float32, workers)
	for i, v := range counts {
		perWorker[i/AuditSpread] += v
	}
	perRow = make([]float32, rows)
	if rows > 0 {
		if err := trained.PullRange(keyspace.Range{Lo: 0, Hi: uint64(rows)}, perRow).Wait(ctx); err != nil {
			return nil, nil, fmt.Errorf("drill: audit: pull %s: %w", TrainedTable, err)
		}
	}
	return perWorker, perRow, nil
}
