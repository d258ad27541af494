package ps

import (
	"context"
	"fmt"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// Dial connects to the coordinators at addrs (host:port, comma-separated:
// the client goes to whichever leads) and then, like Connect, to every
// server. With o.JoinAs set it first joins the cluster as that worker.
func Dial(ctx context.Context, addrs string, o Options) (*Client, error) {
	cc := api.NewClient(addrs, o.Network)
	if o.JoinAs != "" {
		if err := cc.WaitReachable(ctx); err != nil {
			return nil, fmt.Errorf("ps: %w", err)
		}
		rank, err := cc.JoinWorker(ctx, o.JoinAs, "")
		if err != nil {
			return nil, fmt.Errorf("ps: joining as worker %s: %w", o.JoinAs, err)
		}
		o.Rank = rank
		if o.NodeID == "" {
			o.NodeID = o.JoinAs
		}
	}
	return Connect(ctx, cc, o)
}
