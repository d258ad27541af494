package lr

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
)

// AuditSpread is how many AuditTable keys a worker spreads its count
// over, one per minibatch step in turn. Each key lies in a slot of its own
// (keyspace slots are 64 keys), so the count crosses many servers' chains
// and a lost update shows wherever it happens; one key would live on one
// chain and see only that chain's losses.
const AuditSpread = 64

// AuditKey is the i-th (mod AuditSpread) AuditTable key of worker rank.
func AuditKey(rank, i int) uint64 {
	return (uint64(rank)*AuditSpread + uint64(i%AuditSpread)) * 64
}

// maxAuditInFlight bounds the audit pushes a worker has outstanding; it is
// above the gradient pushes' window, so it only bites if the audit tables'
// servers are much slower than the model's.
const maxAuditInFlight = 32

// auditor does a worker's side of Config.Audit.
type auditor struct {
	rank    int
	audit   *ps.Table
	trained *ps.Table
	keys    [AuditSpread][1]uint64 // the worker's AuditKeys, each a one-key list
	step    int
	val     []float32 // [1]: the +1 of an AuditTable push
	ones    []float32 // grows to the largest batch; read only once shared
	counted []*ps.Future
	others  []*ps.Future
	acked   int64
	onAck   func(rank int, acked int64, at time.Time) error
}

func newAuditor(ctx context.Context, c *ps.Client, onAck func(int, int64, time.Time) error) (*auditor, error) {
	a := &auditor{rank: c.Rank(), val: []float32{1}, onAck: onAck}
	for i := range a.keys {
		a.keys[i][0] = AuditKey(c.Rank(), i)
	}
	var err error
	if a.audit, err = c.CreateTable(ctx, AuditSpec(AuditTable)); err != nil {
		return nil, fmt.Errorf("lr: audit: %w", err)
	}
	if a.trained, err = c.CreateTable(ctx, AuditSpec(TrainedTable)); err != nil {
		return nil, fmt.Errorf("lr: audit: %w", err)
	}
	return a, nil
}

// push sends one minibatch's audit increments: +1 for the worker, +1 for
// every row trained. The slices sent are never written again.
func (a *auditor) push(rows []int) {
	a.counted = append(a.counted, a.audit.Push(a.keys[a.step%AuditSpread][:], a.val))
	a.step++
	if len(rows) == 0 {
		return
	}
	keys := make([]uint64, len(rows))
	for i, r := range rows {
		keys[i] = uint64(r)
	}
	slices.Sort(keys)
	if len(a.ones) < len(keys) {
		a.ones = make([]float32, len(keys))
		for i := range a.ones {
			a.ones[i] = 1
		}
	}
	a.others = append(a.others, a.trained.Push(keys, a.ones[:len(keys)]))
}

// collect counts the acknowledged audit pushes: those done by now, or,
// with all, every one (waiting for them). It also waits while more than
// maxAuditInFlight are outstanding. A failed push is an error.
func (a *auditor) collect(ctx context.Context, all bool) error {
	err := drain(ctx, &a.counted, all, func() error {
		a.acked++
		if a.onAck == nil {
			return nil
		}
		return a.onAck(a.rank, a.acked, time.Now())
	})
	if err != nil {
		return err
	}
	return drain(ctx, &a.others, all, nil)
}

// drain removes the completed futures at the front of *fs, in order,
// calling done for each; it waits for the front one when all is set or
// too many are outstanding.
func drain(ctx context.Context, fs *[]*ps.Future, all bool, done func() error) error {
	for len(*fs) > 0 {
		f := (*fs)[0]
		if all || len(*fs) > maxAuditInFlight {
			if err := f.Wait(ctx); err != nil {
				return fmt.Errorf("lr: audit push: %w", err)
			}
		}
		select {
		case <-f.Done():
		default:
			return nil
		}
		if err := f.Err(); err != nil {
			return fmt.Errorf("lr: audit push: %w", err)
		}
		*fs = (*fs)[1:]
		if done != nil {
			if err := done(); err != nil {
				return fmt.Errorf("lr: audit: %w", err)
			}
		}
	}
	return nil
}

// ReadAudit pulls the audit tables' counts: for each worker rank in
// [0, workers) the sum of its AuditTable keys, and for each training row in
// [0, rows) how often it was trained.
func ReadAudit(ctx context.Context, c *ps.Client, workers, rows int) (perWorker, perRow []float32, err error) {
	open := func(name string) (*ps.Table, error) {
		t, err := c.Table(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("lr: audit: %w", err)
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
			return nil, nil, fmt.Errorf("lr: audit: pull %s: %w", AuditTable, err)
		}
	}
	perWorker = make([]float32, workers)
	for i, v := range counts {
		perWorker[i/AuditSpread] += v
	}
	perRow = make([]float32, rows)
	if rows > 0 {
		if err := trained.PullRange(keyspace.Range{Lo: 0, Hi: uint64(rows)}, perRow).Wait(ctx); err != nil {
			return nil, nil, fmt.Errorf("lr: audit: pull %s: %w", TrainedTable, err)
		}
	}
	return perWorker, perRow, nil
}
