package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestReportLossRetries: a loss count the coordinator could not take
// (unreachable, in a failover) is sent again until it is taken; one it
// refuses as malformed is not, and neither is one whose server stops.
func TestReportLossRetries(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	tries := 0
	err := reportLoss(t.Context(), log, time.Millisecond, func(context.Context) error {
		if tries++; tries < 4 {
			return fmt.Errorf("%w: connection refused", api.ErrUnavailable)
		}
		return nil
	})
	if err != nil || tries != 4 {
		t.Errorf("%d tries, %v: want the fourth to land", tries, err)
	}
	tries = 0
	err = reportLoss(t.Context(), log, time.Millisecond, func(context.Context) error {
		tries++
		return fmt.Errorf("%w: seqs not sorted", api.ErrBadRequest)
	})
	if !errors.Is(err, api.ErrBadRequest) || tries != 1 {
		t.Errorf("%d tries, %v: want one, refused", tries, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err = reportLoss(ctx, log, time.Millisecond, func(context.Context) error { return api.ErrUnavailable })
	if err == nil || ctx.Err() == nil {
		t.Errorf("a server that stops: %v (context %v), want a failure once its context ended", err, ctx.Err())
	}
}
