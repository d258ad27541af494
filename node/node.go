package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/terrace-ml/terrace/coord"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/server"
)

// DefaultJoinTimeout bounds how long a node waits for its coordinator and
// peers before it gives up with an error.
const DefaultJoinTimeout = 30 * time.Second

// CoordinatorConfig configures RunCoordinator.
type CoordinatorConfig struct {
	Listen  string
	Options coord.Options
	Logger  *slog.Logger
	// Ready, when set, receives the coordinator once it listens.
	Ready func(c *coord.Coordinator, addr string)
}

// RunCoordinator serves a coordinator until ctx ends.
func RunCoordinator(ctx context.Context, cfg CoordinatorConfig) error {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("coordinator: listen: %w", err)
	}
	c := coord.New(cfg.Options)
	hs := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	go c.Monitor(ctx, log)
	go c.WatchWorkers(ctx)
	if cfg.Ready != nil {
		cfg.Ready(c, ln.Addr().String())
	}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	})
	defer stop()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("coordinator: %w", err)
	}
	return nil
}

// ServerConfig configures RunServer.
type ServerConfig struct {
	ID          string
	Listen      string // data-plane address to listen on
	Advertise   string // address workers dial; the listener's address if empty
	Coordinator string
	JoinTimeout time.Duration
	Logger      *slog.Logger
	// Ready, when set, receives the server once it has joined.
	Ready func(s *server.Server)
}

// RunServer listens, joins the coordinator, and serves while following
// the published layout, until ctx ends.
func RunServer(ctx context.Context, cfg ServerConfig) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.JoinTimeout <= 0 {
		cfg.JoinTimeout = DefaultJoinTimeout
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("server %s: listen: %w", cfg.ID, err)
	}
	defer ln.Close()
	addr := cfg.Advertise
	if addr == "" {
		addr = ln.Addr().String()
	}
	cc := coord.NewClient(cfg.Coordinator)
	jctx, cancel := context.WithTimeout(ctx, cfg.JoinTimeout)
	defer cancel()
	if err := cc.WaitReachable(jctx); err != nil {
		return fmt.Errorf("server %s: %w", cfg.ID, err)
	}
	l, err := cc.JoinServer(jctx, cfg.ID, addr)
	if err != nil {
		return fmt.Errorf("server %s: join: %w", cfg.ID, err)
	}
	s := server.New(server.Options{ID: cfg.ID, Logger: cfg.Logger})
	if err := s.Configure(l); err != nil {
		return err
	}
	if cfg.Ready != nil {
		cfg.Ready(s)
	}
	errc := make(chan error, 2)
	go func() { errc <- s.Serve(ctx, ln) }()
	go func() { errc <- followLayout(ctx, cc, s, l.Version, cfg.Logger) }()
	err = <-errc
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// followLayout installs every new layout the coordinator publishes. A
// coordinator that stays unreachable for longer than the join timeout does
// not stop the server: its data plane goes on serving the last layout.
func followLayout(ctx context.Context, cc *coord.Client, s *server.Server, version uint64, log *slog.Logger) error {
	for ctx.Err() == nil {
		l, err := cc.Layout(ctx, version)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("layout poll failed; retrying", "err", err)
			select {
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		if err := s.Configure(l); err != nil {
			return err
		}
		version = l.Version
	}
	return nil
}

// Job is a worker's work: it trains through the client and returns a
// report (any JSON-encodable value).
type Job func(ctx context.Context, c *ps.Client) (any, error)

// WorkerConfig configures RunWorker.
type WorkerConfig struct {
	ID          string
	Coordinator string
	JoinTimeout time.Duration
	Logger      *slog.Logger
}

// RunWorker joins the coordinator, connects to the servers, runs job and
// reports its result to the coordinator.
func RunWorker(ctx context.Context, cfg WorkerConfig, job Job) (any, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.JoinTimeout <= 0 {
		cfg.JoinTimeout = DefaultJoinTimeout
	}
	cc := coord.NewClient(cfg.Coordinator)
	jctx, cancel := context.WithTimeout(ctx, cfg.JoinTimeout)
	defer cancel()
	if err := cc.WaitReachable(jctx); err != nil {
		return nil, fmt.Errorf("worker %s: %w", cfg.ID, err)
	}
	rank, err := cc.JoinWorker(jctx, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("worker %s: join: %w", cfg.ID, err)
	}
	c, err := ps.Connect(jctx, cc, ps.Options{Rank: rank, NodeID: cfg.ID, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", cfg.ID, err)
	}
	defer c.Close()
	rep, err := job(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("worker %s (rank %d): %w", cfg.ID, rank, err)
	}
	if rep == nil {
		rep = struct{}{}
	}
	if err := cc.Report(ctx, rank, rep); err != nil {
		return rep, fmt.Errorf("worker %s: report: %w", cfg.ID, err)
	}
	return rep, nil
}
