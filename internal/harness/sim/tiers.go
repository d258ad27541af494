package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/server"
)

// SwitchStage asks the coordinator for a live switch to stage To (issue
// 11, Config.Stage): no process starts or stops, and no acknowledged
// update may be lost. A switch the coordinator refuses (another is in
// progress) is noted and skipped.
type SwitchStage struct {
	To tier.Stage
}

func (f SwitchStage) String() string { return fmt.Sprintf("switch to stage %d", f.To) }

func (f SwitchStage) Apply(ctx context.Context, c *Cluster) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c.Note("FAULT switch to stage %d", f.To)
	if _, err := api.NewClient(c.coordAddr, c.net.Host("stage-switcher")).SwitchStage(cctx, f.To, "simulation"); err != nil {
		c.Note("skip %v: %v", f, err)
	}
}

// ledgerCount waits, after a fallback, until the BackupPS's loss ledgers
// have reported (their grace for re-sends, in fake time), and returns
// what the coordinator counted.
func (c *Cluster) ledgerCount(ctx context.Context) api.Loss {
	if c.cfg.Stage == 0 || c.coord == nil {
		return api.Loss{}
	}
	var last time.Time
	for _, h := range c.coord.StageStatus().History {
		if strings.HasPrefix(h.Reason, "revocation") {
			last = h.Started
		}
	}
	if !last.IsZero() {
		t := time.NewTimer(time.Until(last.Add(server.DefaultFallbackGrace + time.Second)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return c.coord.StageStatus().Loss
}
