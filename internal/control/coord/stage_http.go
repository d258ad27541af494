package coord

import (
	"context"
	"net/http"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// stageHandlers serve the stage routes (issue 11).
func (c *Coordinator) stageHandlers(mux *http.ServeMux) {
	handle(mux, api.RouteStage, func(ctx context.Context, s api.StageSwitch) (any, error) {
		r, err := c.call(ctx, func(m *Machine, id uint64) { m.SwitchStage(id, s.To, s.Reason) })
		return r.Layout, err
	})
	handleUpTo(mux, api.RouteLoss, api.MaxLossBytes, func(ctx context.Context, r api.LossReport) (any, error) {
		if err := r.Check(); err != nil {
			return nil, err
		}
		_, err := c.call(ctx, func(m *Machine, id uint64) { m.ReportLoss(id, r) })
		return struct{}{}, err
	})
	mux.HandleFunc(api.RouteStageHistory, func(w http.ResponseWriter, r *http.Request) { reply(w, c.StageStatus(), nil) })
}

// StageStatus returns the stage the cluster runs and its switches so far.
func (c *Coordinator) StageStatus() api.StageStatus {
	c.mu.Lock()
	stage, hist := c.m.Stage()
	loss := c.m.Loss()
	c.mu.Unlock()
	if hist == nil {
		hist = []api.StageChange{} // [] rather than null in the reply
	}
	return api.StageStatus{Stage: stage, History: hist, Loss: loss}
}
