package node

import (
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
