package main

import (
	"context"
	"fmt"
	"io"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// workerJob takes the cluster's job from the coordinator (or submits the
// worker's own flags as the job, if none is set), and builds the worker's
// work for it: a worker trains the job the cluster runs, never one of its
// own making.
func (w *workerFlags) workerJob(ctx context.Context, out io.Writer) (node.Job, error) {
	log := w.cfg.Logger
	cc := api.NewClient(w.cfg.Coordinator, w.cfg.Network)
	cc.Token = w.cfg.Token
	timeout := w.cfg.JoinTimeout
	if timeout <= 0 {
		timeout = node.DefaultJoinTimeout
	}
	cc.Unreachable = func(addrs string, err error) {
		log.Warn("coordinator unreachable; retrying", "coordinator", addrs, "gives_up_after", timeout, "err", err)
	}
	jctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := cc.WaitReachable(jctx); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	j, err := w.a.resolveJob(jctx, cc, out)
	if err != nil {
		return nil, err
	}
	job, err := w.a.job(out)
	if err != nil {
		return nil, err
	}
	return announced(job, j, out), nil
}

// announced says which rank the worker got and what it trains.
func announced(job node.Job, j api.Job, out io.Writer) node.Job {
	return func(ctx context.Context, c *ps.Client) (any, error) {
		fmt.Fprintf(out, "terrace worker: rank %d, training %s\n", c.Rank(), describeJob(j))
		return job(ctx, c)
	}
}
