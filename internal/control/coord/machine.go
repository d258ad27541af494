package coord

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/copies"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// Config is what a Machine knows of the cluster it coordinates.
type Config struct {
	// Servers and Workers are how many nodes of each role the layout waits
	// for before it is ready.
	Servers, Workers int
	// Partitions is the number of data partitions (at least 1).
	Partitions  int
	VNodes      int
	Replication int
	// Account: workers keep the examples account (Layout.Account).
	Account bool
	// CheckpointDir, with CheckpointEvery > 0, takes a cluster checkpoint
	// there after every CheckpointEvery passes.
	CheckpointDir   string
	CheckpointEvery int
	// FailureTimeout is how long a worker may stay silent before it is
	// declared dead (DefaultFailureTimeout if 0).
	FailureTimeout time.Duration
	// Membership, when set, is published in the layout: nodes register
	// there, and MemberGone hears of their registrations' end.
	Membership *layout.Membership
	Logger     *slog.Logger
	// Stage is the stage the cluster forms in (0: stage 1), SyncInterval
	// the ActivePS's sync interval (docs/design/tiers.md).
	Stage        tier.Stage
	SyncInterval time.Duration
	// StageReason says why the cluster forms in Stage (the planner's
	// reason under --stage auto), for the status until a switch.
	StageReason string
	// ExitWhenDone: the cluster ends with its job (Layout.Shutdown).
	ExitWhenDone bool
	// OnCopiesLost is what the cluster does when slots lose every copy
	// (rewind.go; "": OnCopiesLostContinue).
	OnCopiesLost CopiesLostPolicy
	// ProgressGap, if above 0, is the least time between a save and the
	// next one whose only change is periodic progress (progress.go); 0
	// saves every change at once.
	ProgressGap time.Duration
}

// Machine is the coordinator's state machine: membership, epochs, the
// join and leave handoffs, pieces of data partitions and checkpoints. It
// does no I/O and reads no clock: the driver passes it events, and the
// time in Tick, and takes what it must do from Ready (save the state,
// then publish the layout and send the replies), and reports the save's
// outcome with Advance. It is not safe for concurrent use.
type Machine struct {
	cfg Config
	log *slog.Logger
	st  State
	now time.Time

	beats    map[int]time.Time // last heard of, by rank
	suspects []suspect         // workers whose registration ended
	lastDown string            // the last ring server said to be down (lastServerDown), "id@addr"
	cutSince map[cutKey]time.Time
	waiting  []waiter // requests parked until they can be answered
	ckptDone []CheckpointStat
	// trained counts the rows recorded as trained since this machine
	// started, every job's (the metric and the rate; the job's own count
	// is State.Trained; not saved).
	trained int64
	// clocks is each worker rank's last two reported clocks and when,
	// from its heartbeats once one carried it (beatClocks), else from
	// its progress records (cluster.go; not saved).
	clocks     map[int]clockHist
	beatClocks map[int]bool
	// entered is when each rank was last answered after it waited for
	// work (a parked Acquire or Split): it then enters at the servers'
	// clock (ps.Client.enterClock), so its clocks heard before are no
	// measure of it (cluster.go, noteClock).
	entered map[int]time.Time
	// noticed is the last eviction notice on the timeline of each node
	// (noteNotice; not saved).
	noticed map[string]string
	// committing: the Commit of the checkpoint in progress was handed
	// out, and its outcome (Committed) is awaited.
	committing bool
	// The replies to periodic progress not yet saved; each rank's last
	// record and the partitions' lengths seen, for the pace (progress.go;
	// not saved).
	parked   []Reply
	lastSave time.Time
	paces    map[int]pace
	rows     map[int]int

	// copies is the account of copies (copies.go), saved as st.Copies
	// when copiesChanged.
	copies        *copies.Account
	copiesChanged bool
	// restartLoss is what restarts took every copy of since the last
	// Ready (restartedCopies).
	restartLoss copies.Loss

	// partsDirty are the partitions whose records changed since the
	// last save; rewrite: the next save rewrites every record (parts.go).
	partsDirty map[int]struct{}
	rewrite    bool

	// What the next Ready carries.
	dirty         bool // st changed since the last Ready
	layoutChanged bool
	epochPending  bool // the layout begins an epoch that no Ready carried yet
	out           Ready
	inflight      *Ready // handed out and not yet advanced
	published     *layout.Layout
}

// Ready is what the driver must do, in order: save Save (with Placement
// when the save begins an epoch), then publish Layout and send Replies,
// then report the save's outcome with Advance; the effects (Drops, Commit,
// Probes) follow, and feed their results back as events.
type Ready struct {
	// Save is the state to save, marshalled; nil when unchanged.
	Save *Save
	// Placement, when set, is the layout of the save that begins an epoch,
	// which the store numbers (Persist).
	Placement *layout.Layout
	// Layout is the layout to publish once saved (nil: unchanged).
	Layout *layout.Layout
	// Replies answer requests; none may be sent before the save.
	Replies []Reply
	// Drops are partition state versions nothing names any more.
	Drops []StateRef
	// Commit asks for a checkpoint's commit record to be written.
	Commit *Commit
	// Rewind asks for the newest intact checkpoint, to go back to
	// (Rewound).
	Rewind *RewindRead
	// Probes ask for servers to be dialled (MemberGone).
	Probes []Probe
	// AllReported: every worker has reported or is gone; EndedJob is the
	// number of the job that ended so (api.JobStatus.Number).
	AllReported bool
	EndedJob    uint64
	// Events are what happened, for the timeline, once saved; the driver
	// numbers them and stamps the epoch (events.go).
	Events      []api.Event
	beginsEpoch bool
}

// Reply answers request ID (0: nobody waits).
type Reply struct {
	ID       uint64
	Err      error
	Layout   *layout.Layout
	Rank     int
	Grant    api.Grant
	Progress api.ProgressReply
	// Removed, for ServerFailed, MemberGone and Probed: the node was
	// taken out.
	Removed bool
	// Job, for SubmitJob: the job in force; Evals, for ClaimEval: the
	// passes handed out.
	Job     *api.Job
	Evals   []int
	Pending []int
	// Seq, for RequestCheckpoint: the checkpoint that will serve the
	// request.
	Seq        uint64
	wantLayout bool
}

// StateRef names a partition state version.
type StateRef struct {
	Partition int
	Version   uint64
}

// Probe asks the driver to dial server ID at Addr and report with Probed.
type Probe struct {
	ReqID       uint64
	ID, Addr    string
	Incarnation string
}

// NewMachine returns the machine of a coordinator that nothing has joined
// yet, at time now.
func NewMachine(cfg Config, now time.Time) *Machine {
	cfg.Partitions = max(1, cfg.Partitions)
	m := &Machine{cfg: cfg, log: cfg.Logger, st: newState(cfg), now: now, copies: copies.New()}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.beats, m.cutSince, m.partsDirty = map[int]time.Time{}, map[cutKey]time.Time{}, map[int]struct{}{}
	// The first save starts a generation of records of its own: a store
	// holds none of another's after it.
	m.rewrite = true
	m.st.Layout.Membership = cfg.Membership
	m.st.Layout.FailureTimeoutMillis = cfg.FailureTimeout.Milliseconds()
	m.st.Layout.SyncIntervalMillis = cfg.SyncInterval.Milliseconds()
	l := m.snapshot()
	m.published = l
	return m
}

// RestoreMachine returns the machine of a coordinator that takes over
// from the one that saved what saved holds, at time now. epoch, if not 0,
// is the number the store gave the last epoch saved: the state saved with
// it did not know it yet. Every worker gets a fresh failure timeout.
func RestoreMachine(cfg Config, saved Saved, epoch uint64, now time.Time) (*Machine, error) {
	st, inline, err := decodeSaved(saved)
	if err != nil {
		return nil, err
	}
	m := NewMachine(cfg, now)
	m.st, m.rewrite = st, inline
	if m.copies, err = copies.Restore(st.Copies); err != nil {
		return nil, fmt.Errorf("coord: saved state: %w", err)
	}
	l := &m.st.Layout
	if epoch > 0 {
		l.Epoch = epoch
	}
	// Nodes register where this coordinator says, and time out as it does.
	l.Membership, l.FailureTimeoutMillis = cfg.Membership, cfg.FailureTimeout.Milliseconds()
	for _, r := range st.Workers {
		m.beats[r] = now
	}
	for _, k := range m.pendingCuts() {
		m.cutSince[k] = now
	}
	// The saved layout, published again under a new version: its content
	// is what was saved, so nothing unsaved becomes visible.
	l.Version++
	m.layoutChanged = true
	m.published = m.snapshot()
	m.dueAgain()
	m.commitIfReported()
	m.askRewindAgain()
	return m, nil
}

func (m *Machine) failureTimeout() time.Duration {
	if m.cfg.FailureTimeout > 0 {
		return m.cfg.FailureTimeout
	}
	return DefaultFailureTimeout
}

// snapshot copies the layout as it stands.
func (m *Machine) snapshot() *layout.Layout { return cloneLayout(&m.st.Layout) }

// cloneLayout copies l, sharing nothing that changes.
func cloneLayout(l *layout.Layout) *layout.Layout {
	c := *l
	c.Servers, c.Joining, c.Leaving = slices.Clone(l.Servers), slices.Clone(l.Joining), slices.Clone(l.Leaving)
	c.Tables, c.Finished = slices.Clone(l.Tables), slices.Clone(l.Finished)
	c.Backup, c.Standby, c.Machines = slices.Clone(l.Backup), slices.Clone(l.Standby), slices.Clone(l.Machines)
	if l.Switch != nil {
		sw := *l.Switch
		c.Switch = &sw
	}
	return &c
}

// publish makes the layout change in the next Ready, under a new version.
func (m *Machine) publish() {
	l := &m.st.Layout
	l.Version++
	was := l.Ready
	l.Ready = l.Ready || m.serversJoined()+m.st.Removed >= m.cfg.Servers && len(m.st.Workers) >= m.cfg.Workers && l.Resume == nil
	if l.Ready && !was && l.Job == 0 { // later jobs keep the first's tiers
		m.arrangeTiers()
	}
	m.layoutChanged, m.dirty = true, true
}

// newEpoch starts a new epoch in the layout about to be published: the
// placement of keys changes. The epoch gets its final number when it is
// saved (Advance); until then it is the next count.
func (m *Machine) newEpoch() {
	l := &m.st.Layout
	if !m.epochPending {
		l.PrevEpoch = l.Epoch
		m.st.Epochs++
	}
	l.Epoch = l.PrevEpoch + 1
	m.epochPending = true
	m.st.StageIntact = false // heads or BackupPS change (tiers.go)
	if sw := l.Switch; sw != nil && sw.Flush {
		// A head may change: its successor lacks the stream's history.
		c := *sw
		c.Flush = false
		l.Switch = &c
	}
}

func (m *Machine) reply(r Reply) { m.out.Replies = append(m.out.Replies, r) }

func (m *Machine) fail(id uint64, err error) { m.reply(Reply{ID: id, Err: err}) }

func (m *Machine) replyLayout(id uint64) { m.reply(Reply{ID: id, wantLayout: true}) }

// hasReady reports whether Ready has something to hand out.
func (m *Machine) hasReady() bool {
	o := &m.out
	return m.inflight == nil && (m.dirty || m.layoutChanged || len(o.Replies) > 0 || len(o.Drops) > 0 ||
		o.Commit != nil || o.Rewind != nil || len(o.Probes) > 0 || o.AllReported || len(o.Events) > 0)
}

// Ready hands out what must be done since the last Ready, and false if
// nothing is, or if the last Ready has not been advanced: one save is in
// flight at a time, while events go on changing the state in memory.
func (m *Machine) Ready() (Ready, bool) {
	m.settle()
	m.unpark()
	if !m.hasReady() {
		return Ready{}, false
	}
	if m.layoutChanged {
		m.abandonIfServerGone()
		m.followCopies(m.snapshot())
	} else if len(m.restartLoss.Arcs) > 0 {
		m.followCopies(nil)
	}
	rd := m.out
	m.out = Ready{}
	if m.dirty {
		m.saveCopies()
		rd.Save = m.save()
		m.lastSave = m.now
	}
	if m.layoutChanged {
		rd.Layout = m.snapshot()
		if m.epochPending {
			rd.Placement, rd.beginsEpoch = rd.Layout, true
			m.epochPending = false
		}
	}
	shown := m.published
	if rd.Layout != nil {
		shown = rd.Layout
	}
	for i := range rd.Replies {
		if rd.Replies[i].wantLayout && rd.Replies[i].Err == nil {
			rd.Replies[i].Layout = shown
		}
	}
	m.dirty, m.layoutChanged = false, false
	m.inflight = &rd
	return rd, true
}

// Advance reports that the last Ready's state was saved, the epoch it
// began numbered epoch by the store (0: keep the machine's count). It
// fails if the store numbered the epoch below the one before: the layout
// must then be shown to no one.
func (m *Machine) Advance(epoch uint64) error {
	rd := m.inflight
	if rd == nil {
		return nil
	}
	m.inflight = nil
	if rd.beginsEpoch && epoch > 0 {
		if epoch <= rd.Layout.PrevEpoch {
			return fmt.Errorf("%w: epoch %d saved after epoch %d", api.ErrNotPersisted, epoch, rd.Layout.PrevEpoch)
		}
		provisional, l := rd.Layout.Epoch, &m.st.Layout
		rd.Layout.Epoch = epoch
		m.numberSlotLoss(rd.Layout.Version, epoch)
		if m.epochPending && l.PrevEpoch == provisional {
			// Another epoch began while this one was being saved.
			l.PrevEpoch, l.Epoch = epoch, epoch+1
		} else if l.Epoch == provisional {
			l.Epoch = epoch
		}
	}
	if rd.Layout != nil {
		m.published = rd.Layout
	}
	return nil
}
