package drill

import (
	"context"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// timeline copies the coordinator's event timeline and its samples of
// the cluster into the report, while
// a coordinator still answers; a drill whose coordinators are all gone
// reports none.
func (d *drill) timeline(ctx context.Context) {
	if d.coord == "" {
		return
	}
	cc := api.NewClient(d.coord, nil)
	cc.RetryFor = 2 * time.Second
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	evs, err := cc.Events(ctx, 0, false)
	if err != nil {
		d.log.Warn("could not read the coordinator's event timeline", "err", err)
		return
	}
	d.rep.Events = evs
	if d.rep.History, err = cc.History(ctx); err != nil {
		d.log.Warn("could not read the coordinator's samples of the cluster", "err", err)
	}
}
