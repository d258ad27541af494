package api

import (
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// Roles of the nodes, as they join and register.
const (
	RoleServer = "server"
	RoleWorker = "worker"
)

// Join admits a node: a server at Addr, or a worker.
type Join struct {
	Role string `json:"role"`
	ID   string `json:"id"`
	// Addr is where a server serves the data plane, and where a worker
	// listens for its peers' progress messages (empty: it does not).
	Addr string `json:"addr,omitempty"`
	// Incarnation is new in every process; the node registers in etcd
	// with it too, so that the end of an earlier process's registration
	// takes out nothing.
	Incarnation string `json:"incarnation,omitempty"`
	// Metrics is where the node serves /metrics, if it does (shown by
	// status).
	Metrics string `json:"metrics,omitempty"`
	// Machine is the machine the node runs on (its ID if empty), and Class
	// that machine's class (issue 11).
	Machine string     `json:"machine,omitempty"`
	Class   tier.Class `json:"class,omitempty"`
	// Notice, on a server's leave, is the eviction notice that made it
	// leave, for the timeline (DrainServer).
	Notice *Notice `json:"notice,omitempty"`
}

// Joined answers Join: a worker's rank, a server's layout.
type Joined struct {
	Rank   int            `json:"rank"`
	Layout *layout.Layout `json:"layout,omitempty"`
}

// Synced reports that ring server From has shipped full copies of its
// slots to the servers that hold them once Joiner (joining or leaving) has
// moved, under layout Version.
type Synced struct {
	From    string `json:"from"`
	Joiner  string `json:"joiner"`
	Version uint64 `json:"version"`
}

// Rebuilt reports that server From's rebuild for layout Version ended:
// the full copies it owed the new members of the chains it heads under
// that layout are acknowledged, so each holds every update From
// acknowledged there.
type Rebuilt struct {
	From    string `json:"from"`
	Version uint64 `json:"version"`
}

// Checkpointed reports that server From wrote (or loaded) its part of
// cluster checkpoint Seq, or failed to (Error).
type Checkpointed struct {
	From string `json:"from"`
	Seq  uint64 `json:"seq"`
	// Rewind, in a report of a load, is the layout.Checkpoint.Rewind the
	// server loaded for (0 for a resume of a cluster that starts).
	Rewind int    `json:"rewind,omitempty"`
	Error  string `json:"error,omitempty"`
}
