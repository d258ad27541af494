package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/planner"
	"github.com/terrace-ml/terrace/internal/server"
)

// Tiers runs the drill on machines of two classes (issue 11,
// docs/design/tiers.md): each machine runs one server process and
// WorkersPerMachine worker processes, named after the machine
// (reliable-0, transient-2, ...), and faults can hit every node of a
// class's machines at once.
type Tiers struct {
	Reliable, Transient int
	// WorkersPerMachine is the number of workers on each machine (1 if 0).
	WorkersPerMachine int
	// Stage is the coordinator's --stage (1, 2 or 3), SyncInterval its
	// --sync-interval (its default if 0).
	Stage        string
	SyncInterval time.Duration
	// LinkMbps, when set, gives each machine an emulated link of its
	// class's Mbit/s (each machine binds its own 127.0.0.N).
	LinkMbps *tier.ByClass
	// Price is the coordinator's --price (dollars per machine-hour by
	// class), for its cost so far; empty: none.
	Price string
	// StageReason is the coordinator's --stage-reason: why it forms in
	// Stage (the planner's reason under --stage auto).
	StageReason string
	// Measured, under --stage auto, are a calibration's measurements
	// (`terrace plan --measure`) to plan from instead of the planner's
	// defaults.
	Measured *planner.Measurements
}

func (t *Tiers) perMachine() int { return max(1, t.WorkersPerMachine) }

// TierReport is what a drill on tiers adds to its report.
type TierReport struct {
	Stage        int               `json:"stage"`
	StageHistory []StageSwitchFact `json:"stage_history"`
	// MaxSwitchPauseSeconds is the largest PauseSeconds of the history.
	MaxSwitchPauseSeconds float64 `json:"max_switch_pause_seconds"`
	// UpdatesLost counts the acknowledged pushes lost at revocations
	// without notice, every table's, as the system counted them: the
	// BackupPS's loss ledgers, summed by the coordinator (its
	// terrace_coordinator_updates_lost_total); UpdatesLostBound is what
	// the ledgers allowed in the rounds at risk (one sync interval's
	// worth, by the gate). UpdatesLostByTable splits UpdatesLost.
	UpdatesLost      *int64 `json:"updates_lost"`
	UpdatesLostBound *int64 `json:"updates_lost_bound"`
	// LedgersUnreported counts the ledgers gone before their report
	// (api.Loss.Unreported): UpdatesLost is then a lower bound.
	LedgersUnreported  int              `json:"ledgers_unreported,omitempty"`
	UpdatesLostByTable map[string]int64 `json:"updates_lost_by_table,omitempty"`
	// UpdatesLostAudit is the audit's count of the acknowledged audit
	// pushes lost at those revocations, UpdatesLostLedgerAudit the
	// ledgers' count for the audit table, and UpdatesLostInFlight their
	// difference: audit pushes the ActivePS allowed whose acknowledgement
	// a worker that died with them never logged. The design's relation,
	// ledger >= audit >= ledger - in-flight (docs/design/tiers.md, "Bulk
	// revocation"), is checked per worker (WorkerAudit.LedgerLost): equal
	// for a worker that survived; a breach is noted.
	UpdatesLostAudit       *int64 `json:"updates_lost_audit"`
	UpdatesLostLedgerAudit *int64 `json:"updates_lost_ledger_audit"`
	UpdatesLostInFlight    *int64 `json:"updates_lost_in_flight"`
	// AuditPushesPerInterval is the most audit pushes acknowledged in any
	// window of one sync interval: the audit's own bound.
	AuditPushesPerInterval *int64 `json:"audit_pushes_per_interval"`
	// StreamBytesPerPushByte is the bytes ActivePS streamed to BackupPS per
	// byte of pushes the servers received from workers (their last
	// statistics).
	StreamBytesPerPushByte *float64 `json:"stream_bytes_per_push_byte"`
	Machines               []string `json:"machines"`
	// Plans are the planner's decisions under --stage auto.
	Plans []string `json:"plans,omitempty"`
}

// StageSwitchFact is one switch as the report gives it.
type StageSwitchFact struct {
	AtSeconds float64 `json:"at_seconds"`
	From      int     `json:"from"`
	To        int     `json:"to"`
	// PauseSeconds is the longest interval without an acknowledged audit
	// push that overlaps the switch (from its start to one second after
	// its end): the longest wait a push saw because of it, as the workers
	// saw it.
	PauseSeconds float64 `json:"pause_seconds"`
	// DurationSeconds runs from its start to the epoch that moved the
	// heads.
	DurationSeconds float64 `json:"duration_seconds"`
	Reason          string  `json:"reason"`
}

// startMachine starts machine class-i: its server and its workers.
func (d *drill) startMachine(class Role, i int) error {
	name := fmt.Sprintf("%s-%d", class, i)
	flags := []string{"--machine", name, "--class", string(class)}
	if l := d.cfg.Tiers.LinkMbps; l != nil {
		c := tier.Reliable
		if class == Transient {
			c = tier.Transient
		}
		// 127.0.0.10 on: one address per machine ever started.
		flags = append(flags, "--bind-ip", fmt.Sprintf("127.0.0.%d", 10+d.machines[Reliable]+d.machines[Transient]),
			"--link-mbps", strconv.FormatFloat(l.Of(c), 'g', -1, 64))
	}
	p, err := d.startServer("server-"+name, flags...)
	if err != nil {
		return err
	}
	p.machine, p.class = name, class
	for w := range d.cfg.Tiers.perMachine() {
		p, err := d.startWorker(fmt.Sprintf("worker-%s-%d", name, w), flags...)
		if err != nil {
			return err
		}
		p.machine, p.class = name, class
	}
	d.machines[class]++
	return nil
}

// injectClass carries out a fault on every node of Count machines of a
// class (all of them for AllMachines), or starts Count new machines.
func (d *drill) injectClass(pl Planned, rng *rand.Rand) {
	if pl.Action == Add {
		for range pl.Count {
			i := d.machines[pl.Role]
			if err := d.startMachine(pl.Role, i); err != nil {
				d.rep.note("--add: %v", err)
				continue
			}
			f := Fault{PlannedS: pl.At.Seconds(), TimeS: time.Since(d.started).Seconds(), Action: Add, Role: pl.Role,
				Node: fmt.Sprintf("%s-%d", pl.Role, i), Method: "start"}
			d.rep.Faults = append(d.rep.Faults, f)
			fmt.Fprintf(d.cfg.Out, "terrace: %.2fs: add machine %s\n", f.TimeS, f.Node)
		}
		return
	}
	var machines []string
	for _, p := range d.sup.procs {
		if p.class == pl.Role && p.faulted == "" && !p.done() && !slices.Contains(machines, p.machine) {
			machines = append(machines, p.machine)
		}
	}
	if len(machines) == 0 {
		d.rep.FaultsNotInjected = append(d.rep.FaultsNotInjected, Skipped{PlannedS: pl.At.Seconds(), Action: pl.Action, Role: pl.Role, Reason: "no live " + string(pl.Role) + " machine"})
		return
	}
	rng.Shuffle(len(machines), func(i, j int) { machines[i], machines[j] = machines[j], machines[i] })
	if pl.Count != AllMachines && pl.Count < len(machines) {
		machines = machines[:pl.Count]
	}
	// Every node at once: a class-wide revocation takes them together.
	for _, p := range d.sup.procs {
		if slices.Contains(machines, p.machine) && p.faulted == "" && !p.done() {
			d.hit(pl, p)
		}
	}
}

// stageStatus asks the coordinator for the stage history before the
// nodes stop.
func (d *drill) stageStatus(ctx context.Context) {
	if d.cfg.Tiers == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cl := api.NewClient(d.coord, nil)
	st, err := cl.Stage(cctx)
	if err != nil {
		d.rep.note("stage history: %v", err)
		return
	}
	// The BackupPS count a fallback's loss after a grace for re-sends:
	// wait for it (a run may end seconds after its revocation).
	if at := lastRevocation(st); !at.IsZero() {
		t := time.NewTimer(time.Until(at.Add(server.DefaultFallbackGrace + 2*time.Second)))
		select {
		case <-t.C:
			if later, err := cl.Stage(cctx); err == nil {
				st = later
			}
		case <-ctx.Done():
		}
		t.Stop()
	}
	d.stage = &st
}

// lastRevocation is when the last fallback after a revocation without
// notice began (zero if none).
func lastRevocation(st api.StageStatus) time.Time {
	var at time.Time
	for _, h := range st.History {
		if strings.HasPrefix(h.Reason, "revocation") {
			at = h.Started
		}
	}
	return at
}

// fillLoss reports the ledgers' count of updates lost beside the audit's,
// and checks the relation between them (TierReport.UpdatesLostInFlight).
func (d *drill) fillLoss(tr *TierReport, revoked bool) {
	var loss api.Loss
	if d.stage != nil {
		loss = d.stage.Loss
	}
	tr.UpdatesLost, tr.UpdatesLostBound, tr.LedgersUnreported = &loss.UpdatesLost, &loss.UpdatesLostBound, loss.Unreported
	tr.UpdatesLostByTable = loss.ByTable
	lost := d.rep.AckedUpdatesLost
	if lost == nil {
		return
	}
	var audit int64
	if revoked {
		audit = *lost
	}
	ledger := loss.ByTable[AuditTable]
	inFlight := ledger - audit
	tr.UpdatesLostAudit, tr.UpdatesLostLedgerAudit, tr.UpdatesLostInFlight = &audit, &ledger, &inFlight
	// Acknowledged audit pushes lost beyond the ledgers' count: none.
	beyond := max(0, *lost-ledger)
	d.rep.AckedUpdatesLost = &beyond
	if !revoked {
		return
	}
	// Per worker: equal for a worker that survived (its re-sends left the
	// ledger), and ledger >= audit >= ledger - in flight for one that died.
	for i := range d.rep.Audit {
		w := &d.rep.Audit[i]
		if w.Rank < 0 {
			continue
		}
		n := loss.ByWorker[AuditTable][w.Rank]
		w.LedgerLost = &n
		switch {
		case w.Finished && n != w.Lost:
			d.rep.note("worker rank %d survived, but the ledgers count %d of its audit pushes lost and the audit %d", w.Rank, n, w.Lost)
		case !w.Finished && (n < w.Lost || n-w.Lost > auditQueue):
			d.rep.note("worker rank %d died: the ledgers count %d of its audit pushes lost and the audit %d, outside ledger >= audit >= ledger - in flight (at most %d)", w.Rank, n, w.Lost, auditQueue)
		}
	}
	d.rep.note("updates_lost is the system's own count (the BackupPS's loss ledgers, summed by the coordinator) of acknowledged pushes lost at the fallback after a revocation without notice, every table's; updates_lost_audit is the audit's count of audit pushes lost, updates_lost_ledger_audit the ledgers' count of them, updates_lost_in_flight the difference (pushes allowed whose acknowledgement a dying worker never logged); acked_updates_lost is what the audit lost beyond the ledgers' count; examples_skipped counts the trained table's increments lost in the same round")
}

// fillTiers computes the tier figures of the report once the audit and
// the servers' statistics are in.
func (d *drill) fillTiers(timelines [][]int64) {
	t := d.cfg.Tiers
	if t == nil {
		return
	}
	tr := &TierReport{StageHistory: []StageSwitchFact{}}
	d.rep.TierReport = tr
	if d.auto != nil {
		tr.Plans = d.auto.Plans
	}
	for _, class := range []Role{Reliable, Transient} {
		for i := range d.machines[class] {
			tr.Machines = append(tr.Machines, fmt.Sprintf("%s-%d", class, i))
		}
	}
	var all []int64
	for _, tl := range timelines {
		all = append(all, tl...)
	}
	slices.Sort(all)
	revoked := false
	if st := d.stage; st != nil {
		tr.Stage = int(st.Stage)
		for _, h := range st.History {
			end := h.Done
			if end.IsZero() {
				end = h.Started
			}
			f := StageSwitchFact{AtSeconds: h.Started.Sub(d.started).Seconds(), From: int(h.From), To: int(h.To), Reason: h.Reason,
				DurationSeconds: end.Sub(h.Started).Seconds(),
				PauseSeconds:    pauseAround(all, h.Started.UnixNano(), end.Add(time.Second).UnixNano()).Seconds()}
			tr.StageHistory = append(tr.StageHistory, f)
			tr.MaxSwitchPauseSeconds = max(tr.MaxSwitchPauseSeconds, f.PauseSeconds)
			revoked = revoked || strings.HasPrefix(h.Reason, "revocation")
		}
	}
	interval := t.SyncInterval
	if interval <= 0 {
		interval = time.Second
	}
	window := mostInWindow(all, interval)
	tr.AuditPushesPerInterval = &window
	d.fillLoss(tr, revoked)
	var push, stream int64
	for _, raw := range d.rep.ServerStats {
		var s struct {
			PushBytes   int64 `json:"push_bytes"`
			StreamBytes int64 `json:"stream_bytes"`
		}
		if json.Unmarshal(raw, &s) == nil {
			push += s.PushBytes
			stream += s.StreamBytes
		}
	}
	if push > 0 {
		r := float64(stream) / float64(push)
		tr.StreamBytesPerPushByte = &r
	}
}

// pauseAround is the longest gap between consecutive times of sorted all
// that overlaps [from, to].
func pauseAround(all []int64, from, to int64) time.Duration {
	var gap time.Duration
	for i := 1; i < len(all); i++ {
		if all[i] >= from && all[i-1] <= to {
			gap = max(gap, time.Duration(all[i]-all[i-1]))
		}
	}
	return gap
}

// mostInWindow is the largest number of times of sorted all within any
// window of length w.
func mostInWindow(all []int64, w time.Duration) int64 {
	best, lo := 0, 0
	for hi := range all {
		for all[hi]-all[lo] > int64(w) {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return int64(best)
}

// tierArgs are the coordinator's tier flags.
func (t *Tiers) coordArgs() []string {
	var args []string
	if t.Stage != "" {
		args = append(args, "--stage", t.Stage)
		if t.SyncInterval > 0 { // the coordinator refuses it without a stage
			args = append(args, "--sync-interval", t.SyncInterval.String())
		}
	}
	if t.Price != "" {
		args = append(args, "--price", t.Price)
	}
	if t.StageReason != "" {
		args = append(args, "--stage-reason", t.StageReason)
	}
	return args
}
