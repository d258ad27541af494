package ps

import (
	"context"
	"fmt"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
)

// pieces is what the partition loop needs of the coordinator, in the
// terms of the control-plane contract (package api): pieces [Start, End)
// of partitions, progress replies that carry the piece's end and cut
// requests, and splits.
type pieces interface {
	Acquire(ctx context.Context, rank, pass int) (api.Grant, error)
	Progress(ctx context.Context, u api.Update) (api.ProgressReply, error)
	Split(ctx context.Context, s api.Split) (api.Grant, error)
	State(ctx context.Context, partition int, version uint64) ([]byte, error)
}

// wholePartitions speaks the contract to a Control that leases whole
// partitions (coord's API before the contract): every piece is a whole
// partition, no reply asks for a cut, and nothing can be split. It goes
// once Control is the contract's (branch coordsm).
type wholePartitions struct{ ctl Control }

func (w wholePartitions) Acquire(ctx context.Context, rank, pass int) (api.Grant, error) {
	g, err := w.ctl.Acquire(ctx, rank, pass)
	if err != nil {
		return api.Grant{}, err
	}
	a := api.Grant{Partition: g.Partition, Offset: g.Offset, End: api.ToEnd, Lease: g.Lease, Done: g.Done, Clock: g.Clock}
	if g.State != 0 {
		a.States = []uint64{g.State}
	}
	return a, nil
}

func (w wholePartitions) Progress(ctx context.Context, u api.Update) (api.ProgressReply, error) {
	if u.Cut != nil && !u.Cut.Declined {
		return api.ProgressReply{}, fmt.Errorf("%w: this coordinator leases whole partitions", api.ErrNoSplit)
	}
	ver, err := w.ctl.Progress(ctx, coord.Update{Rank: u.Rank, Epoch: u.Pass, Partition: u.Partition, Offset: u.Offset, Clock: u.Clock,
		Complete: u.Complete, Lease: u.Lease, State: u.State, HasState: u.HasState})
	return api.ProgressReply{State: ver, End: api.ToEnd}, err
}

func (w wholePartitions) Split(context.Context, api.Split) (api.Grant, error) {
	return api.Grant{}, fmt.Errorf("%w: this coordinator leases whole partitions", api.ErrNoSplit)
}

func (w wholePartitions) State(ctx context.Context, partition int, version uint64) ([]byte, error) {
	return w.ctl.State(ctx, partition, version)
}
