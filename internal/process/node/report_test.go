package node

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestReportQuietWhileStopping: a report to the coordinator that fails
// because its server is stopping is not a warning (a refused train
// --resume printed two "could not report ... context canceled"); one that
// fails while the server runs still is.
func TestReportQuietWhileStopping(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	stopped, stop := context.WithCancel(t.Context())
	stop()
	reportTo(stopped, log, "restore", func(ctx context.Context) error { return ctx.Err() })
	if logs.Len() != 0 {
		t.Fatalf("a report cut short by the server's stop warned:\n%s", logs.String())
	}
	reportTo(t.Context(), log, "restore", func(context.Context) error { return errors.New("coordinator unreachable") })
	if !strings.Contains(logs.String(), "could not report to the coordinator") {
		t.Fatalf("a report that failed while the server runs did not warn:\n%s", logs.String())
	}
}
