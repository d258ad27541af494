package node

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/server"
)

// lossReport is a BackupPS's loss count as the coordinator takes it.
func lossReport(from string, r server.LossReport) api.LossReport {
	conv := func(ps []server.LostPush) []api.LostPush {
		out := make([]api.LostPush, len(ps))
		for i, p := range ps {
			out[i] = api.LostPush{Client: p.Client, Seq: p.Seq, Table: p.Table, Worker: p.Worker}
		}
		return out
	}
	return api.LossReport{From: from, Epoch: r.Epoch, Allowed: api.Runs(conv(r.Allowed)), Lost: api.Runs(conv(r.Lost))}
}

// lossRetryMax bounds the wait between tries of a loss report.
const lossRetryMax = 30 * time.Second

// reportLoss sends a loss count until the coordinator takes it, ctx ends,
// or the coordinator refuses it as malformed. The count is the system's
// only record of what a fallback lost, and one try of 10 s lost it to a
// coordinator failover or a loaded host; sending it again is safe, since
// the coordinator counts each push once.
func reportLoss(ctx context.Context, log *slog.Logger, first time.Duration, send func(context.Context) error) error {
	for wait := first; ; wait = min(2*wait, lossRetryMax) {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := send(sctx)
		cancel()
		if err == nil || ctx.Err() != nil || errors.Is(err, api.ErrBadRequest) {
			return err
		}
		log.Warn("could not report the fallback's loss count to the coordinator; trying again", "in", wait, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
