package api

import (
	"context"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// Stage routes (issue 11): switch the cluster's stage, read its history.
const (
	RouteStage        = "POST /v1/stage" // StageSwitch -> layout
	RouteStageHistory = "GET /v1/stage"  // -> StageStatus
)

// StageSwitch asks for a live switch to stage To, for Reason.
type StageSwitch struct {
	To     tier.Stage `json:"to"`
	Reason string     `json:"reason"`
}

// StageChange is one switch of the stage history.
type StageChange struct {
	From    tier.Stage `json:"from"`
	To      tier.Stage `json:"to"`
	Reason  string     `json:"reason"`
	Started time.Time  `json:"started"`
	Done    time.Time  `json:"done,omitzero"`
}

// StageStatus is the stage the cluster runs and its switches so far.
type StageStatus struct {
	Stage   tier.Stage    `json:"stage"`
	History []StageChange `json:"history"`
	// Loss is what the BackupPS's ledgers counted at fallbacks.
	Loss Loss `json:"loss"`
}

// SwitchStage asks the coordinator to switch the cluster to stage to; it
// returns once the switch has started (its layout published).
func (c *Client) SwitchStage(ctx context.Context, to tier.Stage, reason string) (*layout.Layout, error) {
	var l layout.Layout
	return &l, c.do(ctx, RouteStage, "", StageSwitch{To: to, Reason: reason}, &l)
}

// Stage returns the stage the cluster runs and its switches.
func (c *Client) Stage(ctx context.Context) (StageStatus, error) {
	var s StageStatus
	return s, c.do(ctx, RouteStageHistory, "", nil, &s)
}
