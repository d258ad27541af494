package api

import (
	"context"
	"fmt"

	"github.com/terrace-ml/terrace/internal/placement/layout"
)

// Acquire asks for a piece of pass to train, waiting while every piece
// left is held by a live worker; a Grant with Done ends the pass.
func (c *Client) Acquire(ctx context.Context, rank, pass int) (Grant, error) {
	for {
		var g Grant
		if err := c.do(ctx, RouteAcquire, "", Acquire{Rank: rank, Pass: pass}, &g); err != nil {
			return Grant{}, err
		}
		if g.Done || g.Partition >= 0 {
			return g, nil
		}
	}
}

// Progress reports on a held piece.
func (c *Client) Progress(ctx context.Context, u Update) (ProgressReply, error) {
	var r ProgressReply
	err := c.do(ctx, RouteProgress, "", u, &r)
	return r, err
}

// Split asks for the tail of another worker's piece (see Split); it
// returns once the holder has cut it, or fails with ErrNoSplit.
func (c *Client) Split(ctx context.Context, s Split) (Grant, error) {
	var g Grant
	return g, c.do(ctx, RouteSplit, "", s, &g)
}

// State fetches version ver of partition p's worker state.
func (c *Client) State(ctx context.Context, p int, ver uint64) ([]byte, error) {
	var blob []byte
	return blob, c.do(ctx, RouteState, fmt.Sprintf("?partition=%d&version=%d", p, ver), nil, &blob)
}

// Heartbeat keeps a worker's pieces leased to it, and tells the
// coordinator the worker's clock (0: none).
func (c *Client) Heartbeat(ctx context.Context, rank int, clock int64) error {
	return c.do(ctx, RouteHeartbeat, "", Beat{Rank: rank, Clock: clock}, nil)
}

// Leave ends a worker's membership (a drained departure): its pieces
// return to the pool.
func (c *Client) Leave(ctx context.Context, rank int) error {
	return c.do(ctx, RouteLeave, "", Rank{Rank: rank}, nil)
}

// LeaveServer starts server id's drained departure and returns the layout
// that lists it leaving.
func (c *Client) LeaveServer(ctx context.Context, id string) (*layout.Layout, error) {
	var l layout.Layout
	return &l, c.do(ctx, RouteServerLeave, "", Join{Role: RoleServer, ID: id}, &l)
}

// Synced reports that server from has shipped joiner its copies under
// layout version.
func (c *Client) Synced(ctx context.Context, from, joiner string, version uint64) error {
	return c.do(ctx, RouteSynced, "", Synced{From: from, Joiner: joiner, Version: version}, nil)
}

// Rebuilt reports that server from's rebuild for layout version ended.
func (c *Client) Rebuilt(ctx context.Context, from string, version uint64) error {
	return c.do(ctx, RouteRebuilt, "", Rebuilt{From: from, Version: version}, nil)
}

// Checkpointed reports that server from wrote its part of checkpoint seq
// (err nil) or could not.
func (c *Client) Checkpointed(ctx context.Context, from string, seq uint64, err error) error {
	return c.do(ctx, RouteCheckpointed, "", Checkpointed{From: from, Seq: seq, Error: errText(err)}, nil)
}

// Restored reports that server from loaded its slots of checkpoint seq,
// for load rewind (layout.Checkpoint.Rewind), or could not (err).
func (c *Client) Restored(ctx context.Context, from string, seq uint64, rewind int, err error) error {
	return c.do(ctx, RouteRestored, "", Checkpointed{From: from, Seq: seq, Rewind: rewind, Error: errText(err)}, nil)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	if err.Error() == "" {
		return "failed"
	}
	return err.Error()
}
