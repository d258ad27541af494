package layout

import (
	"fmt"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/table"
)

// Table is a table with the id that data messages carry.
type Table struct {
	ID   uint32     `json:"id"`
	Spec table.Spec `json:"spec"`
}

// Layout is one version of the cluster's configuration. Version grows with
// every change; Epoch grows only when the placement of keys changes, and is
// the epoch every data message carries. Epochs are ordered but not
// contiguous: under etcd an epoch is the revision of the write that saved
// it. PrevEpoch names the epoch it replaced, so that a node can tell a
// layout that follows its own from one that skips an epoch it never saw.
type Layout struct {
	Version   uint64        `json:"version"`
	Epoch     uint64        `json:"epoch"`
	PrevEpoch uint64        `json:"prev_epoch,omitempty"`
	Servers   []ring.Server `json:"servers"`
	VNodes    int           `json:"vnodes"`
	// Joining are servers receiving copies of the slots they will hold,
	// before they join the ring: every head replicates those slots to them,
	// and the coordinator moves them into Servers (a new epoch) once every
	// head reports them caught up. That is the two-phase range handoff.
	Joining []ring.Server `json:"joining,omitempty"`
	// Leaving are ring servers draining: the same handoff in reverse. Every
	// head replicates its slots to the servers that will hold them once the
	// leaving ones are gone, and the coordinator takes a leaving server off
	// the ring (a new epoch) once every head reports those caught up.
	Leaving []string `json:"leaving,omitempty"`
	// Replication is how many servers hold each slot (k); 0 means 1.
	Replication int     `json:"replication,omitempty"`
	Tables      []Table `json:"tables"`
	// Workers is the number of worker ranks; clocks are kept per rank.
	Workers int `json:"workers"`
	// PeerAddrs are where the workers in processes of their own listen for
	// their peers' progress messages, by rank (the Addr of their join;
	// docs/design/stragglers.md).
	PeerAddrs map[int]string `json:"peer_addrs,omitempty"`
	// Partitions is the number of data partitions; workers lease them from
	// the coordinator pass by pass.
	Partitions int `json:"partitions"`
	// Account: workers keep the examples account (ps/account.go), a push
	// per minibatch that lets the coordinator count the rows each pass
	// trained more or fewer times than once.
	Account bool `json:"account,omitempty"`
	// Ready is false until every expected server and worker has joined.
	Ready bool `json:"ready"`
	// Finished lists worker ranks that died or departed: their clocks no
	// longer hold the others back.
	Finished []int `json:"finished,omitempty"`
	// Checkpoint, when set, asks every ring server to write the slots it
	// heads into cluster checkpoint Seq; the coordinator commits it once
	// all have, and holds the next pass's work meanwhile.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// Resume, when set, asks every server to load the slots it holds from
	// committed checkpoint Seq, written by Servers; the layout is not Ready
	// until every server has.
	Resume *Checkpoint `json:"resume,omitempty"`
	// Membership, when set, asks every node to register itself in etcd
	// under a lease of its own, whose expiry tells the coordinator that
	// the node is gone.
	Membership *Membership `json:"membership,omitempty"`
	// FailureTimeoutMillis is how long a node may stay silent before the
	// coordinator declares it dead; 0 means DefaultFailureTimeout. Workers
	// heartbeat five times per timeout.
	FailureTimeoutMillis int64 `json:"failure_timeout_ms,omitempty"`
	// JobDone: the job ended (every worker reported or is gone). A server
	// then leaves at once when told to: no handoff, the keys are results.
	JobDone bool `json:"job_done,omitempty"`
	// Shutdown, with JobDone: the cluster ends with the job (the
	// coordinator's --exit-when-done), and servers exit by themselves.
	Shutdown bool `json:"shutdown,omitempty"`
	// Job numbers the job the layout serves: 0 for the cluster's first,
	// one more for each next. A server that installs a layout of another
	// job drops the tables it no longer lists and restarts its clocks.
	Job uint64 `json:"job,omitempty"`

	// Tiers of reliability (issue 11, docs/design/tiers.md).

	// Stage is the stage the cluster runs (0 means stage 1). In stages 2
	// and 3 Servers are the ActivePS on transient machines and Backup the
	// BackupPS on reliable ones.
	Stage tier.Stage `json:"stage,omitempty"`
	// Backup are the BackupPS: each slot's head streams the slot's
	// aggregated state to the slot's chain of K on this ring, asynchronously,
	// every SyncIntervalMillis. They serve no worker.
	Backup []ring.Server `json:"backup,omitempty"`
	// Standby are servers that hold no slots: transient machines' servers
	// in stage 1, ready for a switch to stage 2.
	Standby []ring.Server `json:"standby,omitempty"`
	// SyncIntervalMillis is the ActivePS's sync interval (1 s if 0).
	SyncIntervalMillis int64 `json:"sync_interval_ms,omitempty"`
	// Switch, while set, is the stage switch in progress: its Joining
	// and Leaving are the handoff of Switch.
	Switch *Switch `json:"switch,omitempty"`
	// Machines lists the machines of every node that joined, with their
	// class.
	Machines []Machine `json:"machines,omitempty"`
}

// Switch is a stage switch in progress.
type Switch struct {
	From   tier.Stage `json:"from"`
	To     tier.Stage `json:"to"`
	Reason string     `json:"reason"`
	// StartedUnixMilli is when the coordinator started it.
	StartedUnixMilli int64 `json:"started_unix_ms"`
	// Flush, on a switch from stage 2 or 3 to 1: every BackupPS has held
	// the slots it streams in full since the stage began (no head and no
	// BackupPS changed), so the ActivePS heads flush their streams to them
	// instead of copying every slot (docs/design/tiers.md, "2 -> 1").
	Flush bool `json:"flush,omitempty"`
}

// Machine is a host with one network link, and its class.
type Machine struct {
	ID    string     `json:"id"`
	Class tier.Class `json:"class"`
}

// DefaultSyncInterval is the sync interval of a layout that sets none.
const DefaultSyncInterval = time.Second

// SyncInterval is how often an ActivePS streams to its BackupPS.
func (l *Layout) SyncInterval() time.Duration {
	if l.SyncIntervalMillis > 0 {
		return time.Duration(l.SyncIntervalMillis) * time.Millisecond
	}
	return DefaultSyncInterval
}

// CurrentStage is Stage, with 0 read as stage 1.
func (l *Layout) CurrentStage() tier.Stage {
	if l.Stage == 0 {
		return tier.Stage1
	}
	return l.Stage
}

// BackupRing builds the BackupPS ring, or nil when there is none.
func (l *Layout) BackupRing() (*ring.Map, error) {
	if len(l.Backup) == 0 {
		return nil, nil
	}
	return ring.New(l.Epoch, l.Backup, l.VNodes)
}

// IsBackup reports whether server id is a BackupPS.
func (l *Layout) IsBackup(id string) bool {
	return slices.ContainsFunc(l.Backup, func(s ring.Server) bool { return s.ID == id })
}

// AllServers returns every server the layout names: on the data ring,
// joining, on standby and the BackupPS, in that order (a new slice).
func (l *Layout) AllServers() []ring.Server {
	return slices.Concat(l.Servers, l.Joining, l.Standby, l.Backup)
}

// MachineClass returns the class of machine id, and whether it is known.
func (l *Layout) MachineClass(id string) (tier.Class, bool) {
	for _, m := range l.Machines {
		if m.ID == id {
			return m.Class, true
		}
	}
	return 0, false
}

// DefaultFailureTimeout is the failure timeout of a layout that sets none.
// It was 1 s until the eighteenth session; a host starved by load held
// etcd registrations and the coordinator's pings past that, and took live
// nodes out (docs/design/resilience.md, "A failure timeout for loaded
// hosts"). A killed process is still found sooner: its closed
// connections are the news.
const DefaultFailureTimeout = 3 * time.Second

// FailureTimeout is how long a node may stay silent before it is declared
// dead; it is also the lease of the nodes' etcd registrations.
func (l *Layout) FailureTimeout() time.Duration {
	if l.FailureTimeoutMillis > 0 {
		return time.Duration(l.FailureTimeoutMillis) * time.Millisecond
	}
	return DefaultFailureTimeout
}

// Membership is where nodes register: members/<role>/<id> under Prefix in
// the etcd cluster at Endpoints, bound to a lease of the layout's failure
// timeout, with their incarnation (a value new in every process) under
// IncarnationLabel.
type Membership struct {
	Endpoints []string `json:"endpoints"`
	Prefix    string   `json:"prefix"`
}

// IncarnationLabel is the registration label that carries a node's
// incarnation, which it also gives when it joins.
const IncarnationLabel = "incarnation"

// Checkpoint names a cluster checkpoint: server S's part is the
// checkpoint Seq under Dir/servers/S, taken after training pass Pass.
type Checkpoint struct {
	Dir     string   `json:"dir"`
	Seq     uint64   `json:"seq"`
	Pass    int      `json:"pass"`
	Servers []string `json:"servers,omitempty"`
	// Rewind, in a Resume, numbers the times the live cluster went back
	// to a checkpoint (0: a resume of a cluster that starts): a server
	// empties its tables and loads the checkpoint once per rewind, though
	// it loaded the same Seq before.
	Rewind int `json:"rewind,omitempty"`
}

// Ring builds the range map of l.
func (l *Layout) Ring() (*ring.Map, error) {
	return ring.New(l.Epoch, l.Servers, l.VNodes)
}

// Final builds the map the ring will have once the joining servers are in
// and the leaving ones out.
func (l *Layout) Final() (*ring.Map, error) {
	var servers []ring.Server
	for _, s := range l.Servers {
		if !slices.Contains(l.Leaving, s.ID) {
			servers = append(servers, s)
		}
	}
	return ring.New(l.Epoch, append(servers, l.Joining...), l.VNodes)
}

// LastAfterJob reports whether server, leaving after the job on a
// cluster that stays up, is the last server on the ring: nobody is there
// to ship its slots to, so it leaves with them, and the layout keeps it
// (a ring is never empty). The coordinator records it as left, and the
// server reads the same from the layout that answers its leave.
func (l *Layout) LastAfterJob(server string) bool {
	return l.JobDone && !l.Shutdown && len(l.Servers) == 1 && l.Servers[0].ID == server &&
		len(l.Leaving) == 0 && len(l.Joining) == 0
}

// K is the replication factor, at least 1.
func (l *Layout) K() int { return max(1, l.Replication) }

// Table returns the table named name.
func (l *Layout) Table(name string) (Table, bool) {
	for _, t := range l.Tables {
		if t.Spec.Name == name {
			return t, true
		}
	}
	return Table{}, false
}

// Validate checks that l is internally consistent.
func (l *Layout) Validate() error {
	if l.Workers < 0 || l.Partitions < 0 {
		return fmt.Errorf("layout: negative workers or partitions")
	}
	seen := map[uint32]bool{}
	for i := range l.Tables {
		t := &l.Tables[i]
		if seen[t.ID] {
			return fmt.Errorf("layout: duplicate table id %d", t.ID)
		}
		seen[t.ID] = true
		if err := t.Spec.Validate(); err != nil {
			return fmt.Errorf("layout: %w", err)
		}
	}
	return nil
}
