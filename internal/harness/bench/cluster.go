package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// onWorker starts a local cluster of the given number of servers and one
// worker, and runs fn as that worker's job: the worker is a real ps.Client
// talking to the servers over loopback TCP, as a remote worker would.
func onWorker(ctx context.Context, servers int, log *slog.Logger, fn func(ctx context.Context, l *node.Local, c *ps.Client) error) (err error) {
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: servers, Workers: 1, Logger: log})
	if err != nil {
		return fmt.Errorf("bench: start local cluster of %d servers: %w", servers, err)
	}
	defer func() {
		if cerr := l.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: stop local cluster: %w", cerr))
		}
	}()
	_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		return nil, fn(ctx, l, c)
	})
	return err
}

// logger sends the cluster's warnings to the progress writer: a dropped
// connection during a run explains a bad figure, and routine messages
// would drown the progress lines.
func logger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// orDiscard lets callers pass a nil progress writer.
func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
