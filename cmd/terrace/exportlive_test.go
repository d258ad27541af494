package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// TestExportNoServer: export from a cluster whose servers are all gone
// fails with errNoServer once its --timeout passes. It waited for a newer
// layout for good.
func TestExportNoServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 1, Workers: 1, Replication: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := api.NewClient(l.CoordAddr, nil).SubmitJob(ctx, api.Job{App: "lr", Passes: 1}); err != nil {
		t.Fatal(err)
	}
	// The cluster forms once its worker joins; the last server then dies
	// and stays in the layout, unreachable.
	if _, err := l.RunWorkers(ctx, func(context.Context, *ps.Client) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	l.KillServer(0)
	cmd := exportCmd()
	cmd.SetArgs([]string{"--coordinator", l.CoordAddr, "--out", filepath.Join(t.TempDir(), "m"), "--timeout", "1s"})
	cmd.SetOut(io.Discard)
	if err := cmd.ExecuteContext(ctx); !errors.Is(err, errNoServer) {
		t.Fatalf("export with every server gone: %v; want %v", err, errNoServer)
	}
}
