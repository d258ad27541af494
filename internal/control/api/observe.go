package api

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// Routes that show the cluster to people (docs/design/observe.md). They
// only read.
const (
	RouteEvents  = "GET /v1/events"  // ?after=SEQ[&follow=1] -> []Event
	RouteStatus  = "GET /v1/status"  // Status
	RouteMetrics = "GET /metrics"    // Prometheus text format
	RouteHistory = "GET /v1/history" // -> []Sample
	// RouteNotice is a worker's word that it got an eviction notice and
	// drains (a server's rides its leave: DrainServer).
	RouteNotice = "POST /v1/notice" // Notice
)

// Event kinds on the coordinator's timeline.
const (
	EventJoin       = "join"       // a node was admitted
	EventJoining    = "joining"    // a server is pre-copying the slots it will hold
	EventRing       = "ring"       // servers went on or off the ring: slots moved
	EventDrain      = "drain"      // a node asked to leave (SIGTERM or an eviction notice)
	EventLeft       = "left"       // a drained node is out
	EventFailed     = "failed"     // the failure detector took a node out
	EventGrant      = "grant"      // a piece of a partition was leased to a worker
	EventSplit      = "split"      // a lease was cut for another worker
	EventCheckpoint = "checkpoint" // a cluster checkpoint began, or was committed
	EventTable      = "table"      // a table was created
	EventLeader     = "leader"     // a coordinator replica took over
	EventPass       = "pass"       // every partition of a pass is trained
	EventReported   = "reported"   // a worker finished and reported
	EventJob        = "job"        // a job ended, or the next one started, on a cluster that stays up
	EventEnd        = "end"        // the job is done and the cluster ends with it (--exit-when-done): its servers and coordinator exit
	EventRefused    = "refused"    // a request without the token or role it needs
	EventStage      = "stage"      // a stage switch began, ended, fell back or was abandoned
	EventNotice     = "notice"     // a node got an eviction notice (a cloud's, a SIGTERM): it drains
	EventLoss       = "loss"       // a BackupPS counted the acknowledged updates a fallback lost
	EventAccount    = "account"    // a pass's examples account found rows trained more or fewer times than once
	EventLost       = "lost"       // every copy of some slots was gone before a new copy was complete
)

// RoutineEvent reports whether events of kind come with every piece of
// work (grants and splits, many a second on a busy job). The timeline
// keeps its newest MaxEvents of them apart from its newest MaxEvents of
// the others, so that they do not push a failure, a drain or a loss out
// of it within seconds.
func RoutineEvent(kind string) bool { return kind == EventGrant || kind == EventSplit }

// EventsKept is where a bounded timeline starts: the number of the oldest
// routine event it keeps and of the oldest other one (0: none of that
// class is kept yet, and none is to be forgotten).
type EventsKept struct{ Routine, Other uint64 }

// Event is one entry of the coordinator's timeline: what happened, to
// which node, why, and the epoch of the layout it produced (the epoch in
// force when nothing moved).
type Event struct {
	Seq   uint64    `json:"seq"`
	Time  time.Time `json:"time"`
	Kind  string    `json:"kind"`
	Node  string    `json:"node,omitempty"`
	Cause string    `json:"cause,omitempty"`
	Epoch uint64    `json:"epoch"`
}

// Status is the cluster at a glance: the job's progress and every node.
type Status struct {
	Time time.Time `json:"time"`
	// Epoch numbers the placement in force; Epochs counts the epochs the
	// cluster has begun. Under etcd an epoch is numbered by the revision
	// of the write that began it, which orders epochs without counting
	// them (docs/design/meta.md), so the two differ.
	Epoch   uint64 `json:"epoch"`
	Epochs  uint64 `json:"epochs,omitempty"`
	Version uint64 `json:"version"`
	Ready   bool   `json:"ready"`
	// Stage is the tiers' stage (1, 2 or 3; docs/design/tiers.md).
	Stage int `json:"stage"`
	// StageReason says why the cluster runs its stage: the reason of the
	// last switch (the planner's, an operator's, a fallback's), or the
	// stage it formed in; empty without tiers.
	StageReason string `json:"stage_reason,omitempty"`
	// Switching, while a switch is in progress, is "FROM -> TO".
	Switching string `json:"switching,omitempty"`
	// UpdatesLost is what the BackupPS's loss ledgers counted lost at
	// fallbacks, and UpdatesAtRisk what they allowed in the rounds at
	// risk (docs/design/tiers.md).
	UpdatesLost   int64 `json:"updates_lost,omitempty"`
	UpdatesAtRisk int64 `json:"updates_at_risk,omitempty"`
	// LedgersUnreported counts the BackupPS a fallback made heads that
	// died or left before reporting their ledger: UpdatesLost is then a
	// lower bound.
	LedgersUnreported int `json:"ledgers_unreported,omitempty"`
	// CopiesLost counts the times every copy of some slots was gone
	// before a new copy was complete (k servers holding them failed
	// together), SlotLosses the last of them (docs/design/resilience.md,
	// "Slots that lost every copy").
	CopiesLost int        `json:"copies_lost,omitempty"`
	SlotLosses []SlotLoss `json:"slot_losses,omitempty"`
	// Rewinds counts the times the cluster went back to a checkpoint after
	// such a loss (coordinator --on-copies-lost resume), LastRewind says
	// the last (docs/design/resilience.md, "Going back to a checkpoint").
	Rewinds    int    `json:"rewinds,omitempty"`
	LastRewind string `json:"last_rewind,omitempty"`
	// UnderReplicated is the share of the hash ring whose slots have fewer
	// complete copies than their chains have members, as the coordinator
	// knows: a rebuild not reported finished yet, or slots started again
	// after a loss. One more failure there can lose every copy.
	UnderReplicated float64 `json:"under_replicated,omitempty"`
	// Machines counts the machines with a live node, by class.
	Machines MachineCount `json:"machines"`
	// DollarsPerHour is what those machines cost at the coordinator's
	// prices, and Dollars what the live machines have cost since this
	// coordinator took over; both nil when it knows no prices (--price).
	DollarsPerHour *float64 `json:"dollars_per_hour,omitempty"`
	Dollars        *float64 `json:"dollars,omitempty"`
	Job            Progress `json:"job"`
	// Definition is the job's definition and results, when one was
	// submitted (the same as GET /v1/job).
	Definition *JobStatus   `json:"definition,omitempty"`
	Nodes      []NodeStatus `json:"nodes"`
	// Events is how many events the timeline holds, the last one's Seq.
	Events uint64 `json:"events"`
	// Checkpoint is the state of cluster checkpoints; nil when the
	// coordinator has no checkpoint directory.
	Checkpoint *CheckpointStatus `json:"checkpoint,omitempty"`
}

// SlotLoss is one time every copy of some slots was gone: the servers
// that held their last copies left the layout (failed, or drained) before
// a new copy was complete, and the slots' new heads started them empty.
// Their acknowledged updates are lost.
type SlotLoss struct {
	Time time.Time `json:"time"`
	// Epoch and Version are the layout's that took the last copies off.
	Epoch   uint64 `json:"epoch"`
	Version uint64 `json:"version"`
	// Servers held the copies lost: they left the layout (the last one
	// at Epoch) before a new copy was complete.
	Servers []string `json:"servers"`
	// Spread lists, as ranges ("3, 7, 11-12"), the slots lost among the
	// first 1,024 (keys below 65,536, placed one by one), SpreadCount how
	// many; Share is the share of the hash ring lost, about the share of
	// the slots beyond them (placed 64 at a time) that were lost.
	Spread      string  `json:"spread,omitempty"`
	SpreadCount int     `json:"spread_count"`
	Share       float64 `json:"share"`
	// Arcs are the lost slots exactly: those whose ring hash
	// (ring.SlotHash) lies in one of them.
	Arcs []HashRange `json:"arcs"`
}

// HashRange is the ring hashes [Lo, Hi].
type HashRange struct {
	Lo uint64 `json:"lo"`
	Hi uint64 `json:"hi"`
}

// CheckpointStatus is the state of cluster checkpoints: the one in
// progress, if any, and the fate of the last ones.
type CheckpointStatus struct {
	Dir string `json:"dir"`
	// Requested: a checkpoint is asked for at the next pass boundary.
	Requested bool `json:"requested"`
	// Seq is the last checkpoint begun; while InProgress, it is taken
	// after pass Pass (Inside: inside pass Pass+1, holding no work of it),
	// and Written of its Servers have written their part.
	Seq        uint64 `json:"seq"`
	InProgress bool   `json:"in_progress"`
	Pass       int    `json:"pass"`
	Inside     bool   `json:"inside,omitempty"`
	Servers    int    `json:"servers"`
	Written    int    `json:"written"`
	// Committed is the last checkpoint committed, taken after pass
	// CommittedPass (CommittedInside: inside the next); Abandoned the last
	// one abandoned, and Why the reason.
	Committed       uint64 `json:"committed"`
	CommittedPass   int    `json:"committed_pass"`
	CommittedInside bool   `json:"committed_inside,omitempty"`
	Abandoned       uint64 `json:"abandoned,omitempty"`
	Why             string `json:"why,omitempty"`
}

// Progress is the training's progress: passes are numbered from 0, and
// Done counts the partitions of Pass trained to their end.
type Progress struct {
	Pass       int `json:"pass"`
	Partitions int `json:"partitions"`
	Done       int `json:"done"`
	// Examples counts the job's rows recorded as trained (a resumed job's
	// since its checkpoint, whose ExamplesFrom partitions were complete
	// before); Rate is rows per second over the last minute (a finished
	// job's: its rows over the time from its first lease to its last
	// rows), ETA the
	// time the pass in progress would take to finish at that rate, and
	// JobETA the time the job's remaining passes would (each 0 when
	// unknown).
	Examples     int64         `json:"examples"`
	ExamplesFrom int           `json:"examples_from,omitempty"`
	Rate         float64       `json:"rate"`
	ETA          time.Duration `json:"eta"`
	JobETA       time.Duration `json:"job_eta"`
	Reported     int           `json:"reported"`
	Workers      int           `json:"workers"`
	// Staleness is the spread of the training workers' clocks (the
	// fastest's last reported clock less the slowest's): how far behind
	// the fastest worker the slowest one's updates are.
	Staleness int64 `json:"staleness"`
	// Accounted counts the passes whose examples account is in (their
	// evaluations'), and Repeated and Skipped sum those accounts.
	Accounted int   `json:"accounted"`
	Repeated  int64 `json:"repeated"`
	Skipped   int64 `json:"skipped"`
}

// MachineCount is a number of machines by class.
type MachineCount struct {
	Reliable  int `json:"reliable"`
	Transient int `json:"transient"`
}

// Sample is the cluster at one moment, for charts over time: the
// coordinator keeps a bounded series of them (GET /v1/history).
type Sample struct {
	Time      time.Time    `json:"time"`
	Stage     int          `json:"stage"`
	Machines  MachineCount `json:"machines"`
	Dollars   *float64     `json:"dollars,omitempty"`
	Rate      float64      `json:"rate"`
	Staleness int64        `json:"staleness"`
	Examples  int64        `json:"examples"`
}

// NodeStatus is one node as the coordinator sees it. State is one of
// serving, joining, leaving, training, idle, finished, dead.
type NodeStatus struct {
	Role  string `json:"role"`
	ID    string `json:"id"`
	Rank  int    `json:"rank,omitempty"`
	Addr  string `json:"addr,omitempty"`
	State string `json:"state"`
	// Machine is the machine the node runs on (its ID when it named
	// none), Class that machine's class, and Tier a tiered server's part:
	// activeps, backupps or standby (empty for a server of stage 1).
	Machine string     `json:"machine,omitempty"`
	Class   tier.Class `json:"class"`
	Tier    string     `json:"tier,omitempty"`
	// Clock is a worker's last reported clock.
	Clock int64 `json:"clock,omitempty"`
	// Holds says what the node holds: a server's slots as their share of
	// the ring, a worker's leased pieces.
	Holds string `json:"holds,omitempty"`
	// Metrics is where the node serves /metrics.
	Metrics string `json:"metrics,omitempty"`
}

// Events returns the events after sequence number after; with follow it
// waits (up to PollWait) until there is one.
func (c *Client) Events(ctx context.Context, after uint64, follow bool) ([]Event, error) {
	q := fmt.Sprintf("?after=%d", after)
	if follow {
		q += "&follow=1"
	}
	var evs []Event
	return evs, c.do(ctx, RouteEvents, q, nil, &evs)
}

// Status returns the cluster's status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	return &s, c.do(ctx, RouteStatus, "", nil, &s)
}

// History returns the coordinator's samples of the cluster over time,
// oldest first.
func (c *Client) History(ctx context.Context) ([]Sample, error) {
	var s []Sample
	return s, c.do(ctx, RouteHistory, "", nil, &s)
}

// Notice is an eviction notice a node got: where from ("aws", "gcp",
// "signal", "file", "http": internal/process/evict), what the source saw,
// and when the machine goes.
type Notice struct {
	Role     string    `json:"role"`
	ID       string    `json:"id"`
	Source   string    `json:"source"`
	Detail   string    `json:"detail,omitempty"`
	Deadline time.Time `json:"deadline,omitzero"`
}

// Cause says n for the timeline.
func (n Notice) Cause() string {
	var b strings.Builder
	fmt.Fprintf(&b, "eviction notice from %s", cmp.Or(n.Source, "an unknown source"))
	if n.Detail != "" {
		fmt.Fprintf(&b, " (%s)", n.Detail)
	}
	if !n.Deadline.IsZero() {
		fmt.Fprintf(&b, ": leaving by %s", n.Deadline.UTC().Format("15:04:05.000"))
	}
	return b.String()
}

// Notice tells the coordinator that worker n.ID got an eviction notice.
func (c *Client) Notice(ctx context.Context, n Notice) error {
	return c.do(ctx, RouteNotice, "", n, nil)
}

// DrainServer starts server id's drained departure, as LeaveServer does,
// because of notice n, which the timeline records.
func (c *Client) DrainServer(ctx context.Context, id string, n Notice) (*layout.Layout, error) {
	var l layout.Layout
	return &l, c.do(ctx, RouteServerLeave, "", Join{Role: RoleServer, ID: id, Notice: &n}, &l)
}
