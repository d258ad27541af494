package ps

import (
	"context"
	"errors"
	"fmt"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// ErrNoSplit: the lease asked for cannot be split now (it is done, no
// live worker holds it, another split of it is pending, or its holder
// declined).
var ErrNoSplit = errors.New("ps: no split")

// cut honours a request to give up the lease's rows from row from on. The
// loop stops at q = max(from, the first row not started): rows already
// started are this worker's to finish. It moves the state of the rows
// [q, end) out of its own (SplittableState) and reports the cut, with that
// state, in a progress record at this boundary; the coordinator grants
// those rows to the worker that asked. It declines when nothing would be
// left to give or the state cannot be split.
func (r *leaseRun) cut(ctx context.Context, from int) error {
	q := max(from, r.off)
	st := r.l.State()
	sp, splittable := st.(SplittableState)
	if q >= r.end || (st != nil && !splittable) {
		r.answer(ctx, &api.Cut{At: q, Declined: true})
		return nil
	}
	c := &api.Cut{At: q}
	if st != nil {
		tail, err := sp.Split(r.order[q:r.end])
		if err != nil {
			return fmt.Errorf("splitting the partition state at row %d: %w", q, err)
		}
		if c.State, err = tail.MarshalBinary(); err != nil {
			return fmt.Errorf("partition state of rows [%d, %d): %w", q, r.end, err)
		}
		c.HasState = true
	}
	r.setEnd(q)
	r.answer(ctx, c)
	return nil
}

// answer sends the answer to a cut request in a progress record at this
// boundary. Unlike a periodic record it is never skipped: it goes after
// the one in flight, and the loop follows both.
func (r *leaseRun) answer(ctx context.Context, c *api.Cut) {
	f := r.l.report(ctx, r.off, false, r.acks(), c)
	r.record = both(r.record, f)
}

// Steal takes over the tail of the lease of partition that another worker
// trains in pass: the holder stops at row from, or at the first row it
// has not started if that is later, and this worker trains the rows from
// there to the lease's end with loop, which must order rows as the
// holder's does, and with the tail's share of the partition state. It
// returns an error wrapping ErrNoSplit when the lease cannot be split, and
// one wrapping ErrDrained after a Drain.
func (c *Client) Steal(ctx context.Context, pass, partition, from int, loop Loop) error {
	loop, err := loop.withDefaults()
	if err != nil {
		return err
	}
	if c.Draining() {
		return ErrDrained
	}
	l, err := c.split(ctx, api.Split{Rank: c.opts.Rank, Pass: pass, Partition: partition, From: from})
	if err != nil {
		return err
	}
	if err := c.train(ctx, l, &loop); err != nil {
		return fmt.Errorf("ps: pass %d partition %d from row %d: %w", pass+1, partition, l.Start, err)
	}
	return nil
}

// split asks the coordinator for the tail of the piece of s.Partition
// that holds row s.From, and makes the lease it grants.
func (c *Client) split(ctx context.Context, s api.Split) (*Lease, error) {
	g, err := c.ctl.Split(ctx, s)
	switch {
	case errors.Is(err, api.ErrNoSplit):
		return nil, fmt.Errorf("%w: pass %d partition %d from row %d: %w", ErrNoSplit, s.Pass+1, s.Partition, s.From, err)
	case err != nil:
		return nil, fmt.Errorf("ps: split of pass %d partition %d: %w", s.Pass+1, s.Partition, err)
	}
	return c.lease(ctx, s.Pass, g)
}
