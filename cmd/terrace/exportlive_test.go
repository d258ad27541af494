package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/apps/mlr"
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

// TestExportLiveNN: export from a cluster that stays up after an nn job
// writes the bytes the job's own --model wrote, the weights read from
// two servers.
func TestExportLiveNN(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	train, test := filepath.Join(dir, "train.svm"), filepath.Join(dir, "test.svm")
	writeNoisyClasses(t, train, 600, 1, 0)
	writeNoisyClasses(t, test, 300, 2, 12)
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 2, Replication: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	live, exported := filepath.Join(dir, "live.model"), filepath.Join(dir, "exported.model")
	cfg := mlr.DefaultNetworkConfig()
	cfg.Train, cfg.Test, cfg.Passes, cfg.Hidden, cfg.Model = train, test, 2, 8, live
	if _, err := api.NewClient(l.CoordAddr, nil).SubmitJob(ctx, api.Job{App: "nn", Train: train, Test: test, Passes: 2, Hidden: 8, Model: live}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) { return mlr.Run(ctx, c, cfg) }); err != nil {
		t.Fatal(err)
	}
	cmd := exportCmd()
	cmd.SetArgs([]string{"--coordinator", l.CoordAddr, "--out", exported})
	cmd.SetOut(io.Discard)
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(exported); err != nil || !bytes.Equal(a, b) {
		t.Fatalf("the model exported from the cluster differs from the job's --model (%v)", err)
	}
}

// TestExportLiveRelativeTrain: a job's relative training path is its
// workers', read from their directories; export from another directory
// says so and takes --train, and writes the job's own --model's bytes.
// --train was refused with --coordinator, and the failure was only "open
// PATH: no such file or directory".
func TestExportLiveRelativeTrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	rel := repoFile(defaultTrain) // relative to this package's directory
	abs, err := filepath.Abs(rel)
	if err != nil {
		t.Fatal(err)
	}
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 1, Replication: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	live, exported := filepath.Join(dir, "live.model"), filepath.Join(dir, "exported.model")
	cfg := lr.DefaultConfig()
	test, err := filepath.Abs(repoFile(defaultTest))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Train, cfg.Test, cfg.Passes, cfg.Model = abs, test, 1, live
	if _, err := api.NewClient(l.CoordAddr, nil).SubmitJob(ctx, api.Job{App: "lr", Train: rel, Passes: 1, Scale: "max", Model: live}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) { return lr.Run(ctx, c, cfg) }); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	export := func(args ...string) error {
		cmd := exportCmd()
		cmd.SetArgs(append([]string{"--coordinator", l.CoordAddr, "--out", exported}, args...))
		cmd.SetOut(io.Discard)
		return cmd.ExecuteContext(ctx)
	}
	if err := export(); err == nil || !strings.Contains(err.Error(), "the job's training data "+rel+" is not here: its workers read that path from their directories") {
		t.Fatalf("export from another directory: %v; want it to say the path is the workers'", err)
	}
	if err := export("--train", abs); err != nil {
		t.Fatal(err)
	}
	a, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(exported); err != nil || !bytes.Equal(a, b) {
		t.Fatalf("the model exported with --train differs from the job's --model (%v)", err)
	}
}
