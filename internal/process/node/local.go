package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/server"
)

// LocalConfig configures a local cluster.
type LocalConfig struct {
	Servers, Workers int
	Partitions       int
	// Account: workers keep the examples account (Layout.Account).
	Account     bool
	Replication int
	// CheckpointDir, CheckpointEvery, CheckpointKeep and Resume: see
	// coord.Options.
	CheckpointDir   string
	CheckpointEvery int
	CheckpointKeep  int
	Resume          bool
	// OnCopiesLost: coord.Options.
	OnCopiesLost coord.CopiesLostPolicy
	Logger       *slog.Logger
	// Network, when set, gives each node, by ID ("coordinator",
	// "server-0", "worker-1"), the network it listens and dials on; nil
	// means TCP on loopback.
	Network func(node string) transport.Network
	// Persist, when set, saves the coordinator's state and numbers its
	// epochs (see coord.Persist).
	Persist coord.Persist
	// FailureTimeout: see coord.Options.
	FailureTimeout time.Duration
	// Prices: see coord.Options.
	Prices tier.ByClass
}

// Local is a whole cluster in this process: a coordinator, servers and
// workers, each on its own loopback TCP port (or its own host of
// LocalConfig.Network), talking as separate hosts would.
type Local struct {
	cfg       LocalConfig
	Coord     *coord.Coordinator
	CoordAddr string
	Servers   []*server.Server

	ctx    context.Context
	cancel context.CancelFunc
	kill   []func() // per server: stops it and waits until it has
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// StartLocal starts the coordinator and the servers.
func StartLocal(ctx context.Context, cfg LocalConfig) (*Local, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Servers < 1 || cfg.Workers < 1 {
		return nil, fmt.Errorf("local cluster: need at least one server and one worker, got %d and %d", cfg.Servers, cfg.Workers)
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &Local{cfg: cfg, ctx: ctx, cancel: cancel}
	ready := make(chan struct{})
	failed := make(chan error, 1)
	l.goRun(func() error {
		err := RunCoordinator(ctx, CoordinatorConfig{
			Listen: "127.0.0.1:0", Network: l.network("coordinator"),
			Options: coord.Options{Servers: cfg.Servers, Workers: cfg.Workers, Partitions: cfg.Partitions, Replication: cfg.Replication, Account: cfg.Account,
				CheckpointDir: cfg.CheckpointDir, CheckpointEvery: cfg.CheckpointEvery, CheckpointKeep: cfg.CheckpointKeep, Resume: cfg.Resume,
				FailureTimeout: cfg.FailureTimeout, Prices: cfg.Prices, OnCopiesLost: cfg.OnCopiesLost},
			Logger: cfg.Logger,
			Ready: func(c *coord.Coordinator, addr string) {
				if cfg.Persist != nil {
					c.SetPersist(cfg.Persist)
				}
				l.Coord, l.CoordAddr = c, addr
				close(ready)
			},
		})
		failed <- err
		return err
	})
	select {
	case <-ready:
	case err := <-failed:
		l.Close()
		return nil, fmt.Errorf("local cluster: coordinator: %w", err)
	case <-ctx.Done():
		l.Close()
		return nil, ctx.Err()
	}
	srv := make(chan *server.Server, cfg.Servers)
	for i := range cfg.Servers {
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		l.kill = append(l.kill, func() { cancel(); <-done })
		id := fmt.Sprintf("server-%d", i)
		l.goRun(func() error {
			defer close(done)
			return RunServer(sctx, ServerConfig{
				ID: id, Listen: "127.0.0.1:0", Coordinator: l.CoordAddr, Network: l.network(id),
				Logger: cfg.Logger, Ready: func(s *server.Server) { srv <- s },
			})
		})
	}
	for range cfg.Servers {
		select {
		case s := <-srv:
			l.Servers = append(l.Servers, s)
		case <-ctx.Done():
			l.Close()
			return nil, errors.Join(ctx.Err(), l.err())
		}
	}
	return l, nil
}

// network is node id's network, or nil (TCP).
func (l *Local) network(id string) transport.Network {
	if l.cfg.Network == nil {
		return nil
	}
	return l.cfg.Network(id)
}

func (l *Local) goRun(fn func() error) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		if err := fn(); err != nil {
			l.mu.Lock()
			l.errs = append(l.errs, err)
			l.mu.Unlock()
		}
	}()
}

func (l *Local) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.errs...)
}

// AddServer starts one more server, which joins the running cluster (as a
// joiner first, then on the ring once its copies are in).
func (l *Local) AddServer(ctx context.Context) (*server.Server, error) {
	l.mu.Lock()
	i := len(l.kill)
	sctx, cancel := context.WithCancel(l.ctx)
	done := make(chan struct{})
	l.kill = append(l.kill, func() { cancel(); <-done })
	l.mu.Unlock()
	ready := make(chan *server.Server, 1)
	id := fmt.Sprintf("server-%d", i)
	l.goRun(func() error {
		defer close(done)
		return RunServer(sctx, ServerConfig{
			ID: id, Listen: "127.0.0.1:0", Coordinator: l.CoordAddr, Network: l.network(id),
			Logger: l.cfg.Logger, Ready: func(s *server.Server) { ready <- s },
		})
	})
	select {
	case s := <-ready:
		l.mu.Lock()
		l.Servers = append(l.Servers, s)
		l.mu.Unlock()
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// KillServer stops server i at once: its listener and connections close,
// as a killed process's would, before it returns (a dial right after it
// reached the server still closing, and TestExportNoServer exported from
// it).
func (l *Local) KillServer(i int) {
	l.mu.Lock()
	kill := l.kill[i]
	l.mu.Unlock()
	kill()
}

// RunWorkers runs job on every worker at once and returns their reports by
// rank, or the first failure.
func (l *Local) RunWorkers(ctx context.Context, job Job) (map[int]json.RawMessage, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, l.cfg.Workers)
	for i := range l.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("worker-%d", i)
			_, err := RunWorker(ctx, WorkerConfig{ID: id, Coordinator: l.CoordAddr, Logger: l.cfg.Logger, Network: l.network(id), Rejoins: DefaultRejoins}, job)
			if err != nil {
				errc <- err
				cancel() // one worker failing would leave the others waiting on its clock
			}
		}()
	}
	wg.Wait()
	close(errc)
	// The others' failures after a worker's are mostly the cancellation
	// that failure caused: leave those out, so that the cause is what a
	// user reads ("bad.txt:2: rating ..." came with "context canceled").
	var errs, canceled []error
	for err := range errc {
		if errors.Is(err, context.Canceled) {
			canceled = append(canceled, err)
		} else {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = canceled
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return l.Coord.Reports(), nil
}

// Close stops every node and waits for them.
func (l *Local) Close() error {
	l.cancel()
	l.wg.Wait()
	return l.err()
}
