package coord

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/copies"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// State is everything the coordinator saves after a change, and what a
// standby restores when it takes over: one struct, marshalled whole. What
// is not here is not saved on purpose: heartbeat times (a new leader gives
// every worker a fresh timeout), requests waiting for an answer (their
// callers ask the new leader again), suspicions being checked.
type State struct {
	Layout layout.Layout `json:"layout"`
	// Workers maps worker IDs to ranks; Incarnations the incarnation each
	// node joined with, by "role/id" (see MemberGone).
	Workers      map[string]int    `json:"workers"`
	Incarnations map[string]string `json:"incarnations,omitempty"`
	// Metrics maps "role/id" to where the node serves /metrics.
	Metrics map[string]string `json:"metrics,omitempty"`
	// Removed counts servers removed after failures or departures: they no
	// longer count towards readiness.
	Removed int `json:"removed"`
	// Epochs counts the epochs begun: the layout's Epoch numbers the
	// last, but under etcd by a revision, which orders epochs and does
	// not count them (8 before a second job, 2,360 after it), so status
	// says how many there were.
	Epochs  uint64                  `json:"epochs,omitempty"`
	Reports map[int]json.RawMessage `json:"reports,omitempty"`
	// Synced records, by joining or leaving server, the ring servers that
	// shipped it their copies; reports for layout versions below SyncFrom
	// do not count (the ring or the joiners changed since).
	Synced   map[string]map[string]bool `json:"synced,omitempty"`
	SyncFrom uint64                     `json:"sync_from,omitempty"`

	// Passes holds the pieces of every pass from DoneBefore on; every pass
	// below DoneBefore is complete and forgotten, so that the state does
	// not grow with passes.
	Passes     map[int]*Pass `json:"passes,omitempty"`
	DoneBefore int           `json:"done_before,omitempty"`
	MaxClock   int64         `json:"max_clock"`
	Grants     uint64        `json:"grants,omitempty"` // the last grant number
	// PartStates are the partitions' worker states as of their last
	// complete pass: versions in row order (several when a split left the
	// partition in pieces). A pass's first piece of a partition starts
	// from them.
	PartStates   map[int][]uint64 `json:"part_states,omitempty"`
	NextStateVer uint64           `json:"next_state_version,omitempty"`
	// Passes and PartStates are saved as a record per partition
	// (parts.go), not in the blob (which saved them until the twentieth
	// session, and is still read so): InProgress lists the passes in
	// Passes as of the save, PartsGen numbers the generation of records
	// the blob goes with.
	InProgress []int  `json:"in_progress,omitempty"`
	PartsGen   uint64 `json:"parts_gen,omitempty"`

	Checkpoint Checkpointing `json:"checkpointing"`

	// StageHistory lists the stage switches, in order (issue 11); Lost
	// counts the ActivePS lost without notice since the last switch.
	StageHistory []StageChange `json:"stage_history,omitempty"`
	ActiveLost   int           `json:"active_lost,omitempty"`
	// StageIntact: the stage is 2 or 3, and every BackupPS has held the
	// slots it is streamed in full since the stage began (it began from
	// stage 1 or formed so, and no epoch began since: no head and no
	// BackupPS changed). A switch to stage 1 then flushes (tiers.go).
	StageIntact bool `json:"stage_intact,omitempty"`
	// Noticed are the ActivePS that announced their departure (and the
	// transient servers of a gather, below).
	Noticed map[string]bool `json:"noticed,omitempty"`
	// Regather is the stage a gather leads back to (tiers.go,
	// gatherForTiers): a stage-1 ring's transient servers drain to
	// standby, and the switch to Regather follows. 0: none under way.
	Regather tier.Stage `json:"regather,omitempty"`
	// Loss is what the BackupPS's ledgers counted at fallbacks (loss.go).
	Loss api.Loss `json:"loss,omitzero"`
	// LossSeen are the pushes the last fallbacks' reports counted, so
	// that a new leader counts each once too (loss.go).
	LossSeen []LossSeen `json:"loss_seen,omitempty"`
	// LossPending are the servers the last fallback made heads whose
	// ledger has not reported yet (loss.go, ledgerGone).
	LossPending []string `json:"loss_pending,omitempty"`
	// Copies is the account of which servers hold a complete copy of
	// which slots (copies.go); CopiesLost counts the times every copy of
	// some slots was lost, SlotLosses the last keepSlotLosses of them.
	Copies     copies.Saved   `json:"copies,omitzero"`
	CopiesLost int            `json:"copies_lost,omitempty"`
	SlotLosses []api.SlotLoss `json:"slot_losses,omitempty"`
	// Rewind is a decision to go back to the newest checkpoint after such
	// a loss, until the driver has read it (rewind.go); Rewinds counts the
	// times the cluster went back, LastRewind says the last, and
	// RewoundGrants is the last grant number revoked by going back: a
	// report under a lease numbered up to it is refused (api.ErrRewound).
	// RewindLoads numbers the loads of checkpoints gone back to: one per
	// rewind, and one more each time a server left the ring during a load
	// (layout.Checkpoint.Rewind; reloadRewind).
	Rewind        *RewindAsk `json:"rewind,omitempty"`
	Rewinds       int        `json:"rewinds,omitempty"`
	RewindLoads   int        `json:"rewind_loads,omitempty"`
	LastRewind    string     `json:"last_rewind,omitempty"`
	RewoundGrants uint64     `json:"rewound_grants,omitempty"`
	// Behind are the worker ranks that have not gone back since the last
	// rewind: until a rank asks for work of a pass the job is in or
	// before, what it asks of a later pass is refused (api.ErrRewound),
	// and it starts its passes again.
	Behind map[int]bool `json:"behind,omitempty"`
	// RankClass is the class of each worker rank's machine.
	RankClass map[int]tier.Class `json:"rank_class,omitempty"`

	// Job is the job the cluster trains (job.go); Evals its evaluations,
	// by pass counted from 1.
	Job   *api.Job      `json:"job,omitempty"`
	Evals map[int]*Eval `json:"evals,omitempty"`
	// ResumedJob: Job is the checkpoint's the cluster resumed from, which
	// a job submitted before any worker has joined replaces (train
	// --resume with more passes); workers given no job take it.
	ResumedJob bool `json:"resumed_job,omitempty"`
	// TableBase is the highest table ID of the jobs before this one: a
	// job's tables are numbered after it, so that no server mistakes an
	// old job's table for a new one's (nextjob.go).
	TableBase uint32 `json:"table_base,omitempty"`
	// Trained counts the job's rows recorded as trained (progress
	// reports), TrainedFrom the passes complete before they began to
	// count (a checkpoint's, on a resume): the status's examples
	// and ETA. Saved, so that a new leader's ETA is not estimated from
	// the rows it saw alone against every partition of the job.
	Trained     int64 `json:"trained,omitempty"`
	TrainedFrom int   `json:"trained_from,omitempty"`
	// TrainBegan is when the job's first piece was granted, TrainedAt
	// when its last rows were recorded: a done job's rate is Trained
	// over the time between (status.go, jobRate). Saved: the rate of
	// samples a second apart lived in the leader's memory, and a new
	// leader showed a finished job's rate as 0.
	TrainBegan time.Time `json:"train_began,omitzero"`
	TrainedAt  time.Time `json:"trained_at,omitzero"`
	// Gone is how each node taken out went (api.EventLeft or
	// EventFailed), for status: a new leader that did not know showed
	// every drained worker as dead, and no server that had left.
	Gone map[string]string `json:"gone,omitempty"`
	// Machines is the machine each node named at its join, by
	// "role/id", where it is not the node's ID: saved, since workers are
	// in no layout, and a new leader that did not know showed each
	// worker's ID as its machine (two transient machines counted as
	// four, and charged so at --price).
	Machines map[string]string `json:"machines,omitempty"`
	// LastLeft is the last server, which left after a job with the model
	// (leaveAtEnd) or before the job's first table (leaveBeforeTables),
	// and stays on the ring until others take its place (dropLeftRing).
	// Saved: a new leader that did not know showed it serving every slot,
	// and the next job's joiners waited for good for a copy from it.
	LastLeft string `json:"last_left,omitempty"`
}

// StageChange is one stage switch: started at Started, published (the
// epoch that moved the heads) at Done. It is saved as the API shows it.
type StageChange = api.StageChange

// Pass is one training pass's pieces, by partition, in row order.
type Pass struct {
	Parts [][]Piece `json:"parts"`
	// An index of the pieces, kept by Machine.changed, so that asking for
	// work does not look at every partition (parts.go): done says which
	// partitions are complete, and notDone counts the others; free which
	// have a free piece, none below firstFree, nor below byClass[c] among
	// those of class c (p mod len(byClass)); holder is the partition each
	// rank holds a piece of, or held last.
	done      []bool
	notDone   int
	free      []bool
	firstFree int
	byClass   []int
	holder    map[int]int
}

// newPass returns a pass of these pieces, counted.
func newPass(parts [][]Piece) *Pass {
	w := &Pass{Parts: parts}
	w.count()
	return w
}

// Piece is the rows [Start, End) of a partition in a pass (End: api.ToEnd
// for the partition's end); the rows before Offset are trained.
type Piece struct {
	Start  int `json:"start"`
	End    int `json:"end"`
	Offset int `json:"offset"`
	// Rank holds the piece, -1 when it is free; Grant numbers its current
	// grant, which reports name, so that one sent under an earlier grant
	// to the same rank (a worker restarted under its old ID) is refused.
	Rank  int    `json:"rank"`
	Grant uint64 `json:"grant,omitempty"`
	Done  bool   `json:"done,omitempty"`
	// States are the versions of the piece's state as of Offset, in row
	// order.
	States []uint64 `json:"states,omitempty"`
	// Cut is a pending split request on the piece.
	Cut *PendingCut `json:"cut,omitempty"`
}

// PendingCut is a split request that the piece's holder has not answered:
// rank By asks for the rows from From on.
type PendingCut struct {
	By   int `json:"by"`
	From int `json:"from"`
}

// Checkpointing is the state of cluster checkpoints (docs/design/control.md).
type Checkpointing struct {
	Seq uint64 `json:"seq"` // the last checkpoint begun (or resumed from)
	// Requested: a checkpoint is asked for at the next pass boundary;
	// Now: one inside the pass, once the one in progress ends.
	Requested bool `json:"requested,omitempty"`
	Now       bool `json:"now,omitempty"`
	// MidPass is what the checkpoint in progress recorded, if it began
	// inside a pass (nil at a boundary).
	MidPass *MidPass `json:"mid_pass,omitempty"`
	// Reported lists the servers that wrote their part of the checkpoint
	// in progress (Layout.Checkpoint), Restored those that loaded the one
	// resumed from (Layout.Resume).
	Reported map[string]bool `json:"reported,omitempty"`
	Restored map[string]bool `json:"restored,omitempty"`
	Started  time.Time       `json:"started,omitzero"`
	// Committed is the last checkpoint committed, Abandoned the last one
	// abandoned and Why the reason: what a waiting `terrace checkpoint
	// --wait` learns its checkpoint's fate from, after a failover too.
	Committed       uint64 `json:"committed,omitempty"`
	CommittedPass   int    `json:"committed_pass,omitempty"`
	CommittedInside bool   `json:"committed_inside,omitempty"`
	Abandoned       uint64 `json:"abandoned,omitempty"`
	Why             string `json:"why,omitempty"`
}

// contains reports whether row lies in the piece.
func (p *Piece) contains(row int) bool {
	return row >= p.Start && (p.End == api.ToEnd || row < p.End)
}

func (p *Piece) String() string {
	end := "end"
	if p.End != api.ToEnd {
		end = fmt.Sprint(p.End)
	}
	return fmt.Sprintf("[%d,%s)", p.Start, end)
}

// newState is the state of a coordinator that nothing has joined yet.
func newState(cfg Config) State {
	return State{
		Layout: layout.Layout{Version: 1, VNodes: cfg.VNodes, Workers: cfg.Workers, Partitions: cfg.Partitions, Account: cfg.Account,
			Replication: max(1, cfg.Replication)},
		Workers: map[string]int{}, Incarnations: map[string]string{}, Reports: map[int]json.RawMessage{},
		Synced: map[string]map[string]bool{}, Passes: map[int]*Pass{}, PartStates: map[int][]uint64{},
		Metrics: map[string]string{},
		Evals:   map[int]*Eval{},
	}
}

// decodeState reads a saved state, with every map made.
func decodeState(blob []byte) (State, error) {
	var st State
	if err := json.Unmarshal(blob, &st); err != nil {
		return State{}, fmt.Errorf("coord: saved state: %w", err)
	}
	st.Workers, st.Incarnations, st.Reports = orEmpty(st.Workers), orEmpty(st.Incarnations), orEmpty(st.Reports)
	st.Synced, st.Passes, st.PartStates = orEmpty(st.Synced), orEmpty(st.Passes), orEmpty(st.PartStates)
	st.Metrics = orEmpty(st.Metrics)
	st.Evals = orEmpty(st.Evals)
	return st, nil
}

func orEmpty[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	return m
}

// complete reports whether every piece of partition p is done.
func (w *Pass) complete(p int) bool {
	return !slices.ContainsFunc(w.Parts[p], func(pc Piece) bool { return !pc.Done })
}

// left counts the partitions not yet complete.
func (w *Pass) left() int { return w.notDone }

// count indexes every partition's pieces.
func (w *Pass) count() {
	w.done, w.notDone = make([]bool, len(w.Parts)), len(w.Parts)
	w.free, w.firstFree, w.byClass, w.holder = make([]bool, len(w.Parts)), 0, nil, map[int]int{}
	for p := range w.Parts {
		w.recount(p)
	}
}

// recount follows a change to partition p's pieces.
func (w *Pass) recount(p int) {
	c := w.complete(p)
	switch {
	case c && !w.done[p]:
		w.notDone--
	case !c && w.done[p]:
		w.notDone++
	}
	w.done[p] = c
	w.free[p] = false
	for _, pc := range w.Parts[p] {
		switch {
		case pc.Done:
		case pc.Rank < 0:
			w.free[p] = true
		default:
			w.holder[pc.Rank] = p
		}
	}
	if w.free[p] {
		w.firstFree = min(w.firstFree, p)
		if n := len(w.byClass); n > 0 {
			w.byClass[p%n] = min(w.byClass[p%n], p)
		}
	}
}
