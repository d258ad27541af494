package coordha

import (
	"context"
	"log/slog"
	"time"
)

// quorumEvery is how often a replica asks etcd whether a quorum answers:
// one linearizable read of a count, of no weight beside the leader's
// saves.
const quorumEvery = time.Second

// quorumWatch says once that etcd lost its quorum and once that it came
// back. A replica whose peers were stopped was silent: a standby waits in
// its campaign, and a leader that stepped down said only that it could
// not save, while no coordinator could lead at all.
type quorumWatch struct {
	log *slog.Logger
	// back says what brings the quorum back (the other members to start).
	back   string
	failed int       // probes failed in a row
	first  time.Time // of the first of them
	lost   bool      // said lost, not yet said back
}

// observe takes the result of a probe made at now. Two failures in a row
// make a loss (one slow answer on a loaded host is not one).
func (q *quorumWatch) observe(now time.Time, err error) {
	if err == nil {
		if q.lost {
			q.log.Warn("etcd has its quorum again: a coordinator can lead, and the cluster goes on", "lost_for", now.Sub(q.first).Round(time.Second))
		}
		q.failed, q.lost = 0, false
		return
	}
	if q.failed++; q.failed == 1 {
		q.first = now
	}
	if q.failed == 2 && !q.lost {
		q.lost = true
		q.log.Warn("etcd lost its quorum: no coordinator can be elected or save the cluster's state; servers and workers keep their last layout, and everything that needs the coordinator (joins, work, failures, checkpoints) waits until "+q.back,
			"err", err)
	}
}

// watchQuorum probes etcd with probe every quorumEvery until ctx ends.
func watchQuorum(ctx context.Context, probe func(context.Context) error, q *quorumWatch) {
	t := time.NewTicker(quorumEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*quorumEvery)
		err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		q.observe(time.Now(), err)
	}
}
