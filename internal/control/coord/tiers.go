package coord

import (
	"fmt"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// Tiers of reliability (issue 11, docs/design/tiers.md): where servers go
// by their machine's class and the stage, the switches between stages,
// and the fallback to stage 1 when the ActivePS are lost.

// ErrStage is wrapped by the refusals of a stage switch.
var ErrStage = fmt.Errorf("%w: stage", api.ErrBadRequest)

// serversJoined counts the servers in the layout, whatever their role.
func (m *Machine) serversJoined() int {
	l := &m.st.Layout
	return len(l.Servers) + len(l.Backup) + len(l.Standby)
}

// noteMachine records the machine of a joining node with its class, and
// refuses a node whose machine is known under the other class. A node
// that names no machine and no class (a cluster without tiers) is a
// reliable machine of its own, and is not listed.
func (m *Machine) noteMachine(j *api.Join) error {
	m.noteNode(j)
	if j.Machine == "" && j.Class == tier.Reliable {
		return nil
	}
	if j.Machine == "" {
		j.Machine = j.ID
	}
	l := &m.st.Layout
	if c, ok := l.MachineClass(j.Machine); ok {
		if c != j.Class {
			return fmt.Errorf("%w: machine %s joined as %s, %s %s says %s", api.ErrBadRequest, j.Machine, c, j.Role, j.ID, j.Class)
		}
		return nil
	}
	l.Machines = append(slices.Clone(l.Machines), layout.Machine{ID: j.Machine, Class: j.Class})
	m.dirty = true
	return nil
}

// rejoinTiered updates the address of a known BackupPS or standby server
// and reports whether s was one.
func (m *Machine) rejoinTiered(s ring.Server) bool {
	l := &m.st.Layout
	for _, list := range []*[]ring.Server{&l.Backup, &l.Standby} {
		i := slices.IndexFunc(*list, func(x ring.Server) bool { return x.ID == s.ID })
		if i < 0 {
			continue
		}
		if (*list)[i].Addr != s.Addr {
			*list = slices.Clone(*list)
			(*list)[i].Addr = s.Addr
			m.newEpoch()
			m.publish()
		}
		return true
	}
	return false
}

// restartedBackup takes a BackupPS whose process restarted (a new
// incarnation joins under its ID) out of the backup ring, as its death
// would: the new process holds nothing, so it joins again as a new
// reliable server (on standby in stages 2 and 3, on the ring in stage 1).
// Kept (when it restarted before the failure detector found it), it was
// the BackupPS of slots it did not hold: a fallback would make its state,
// the rounds streamed since it started, the model.
func (m *Machine) restartedBackup(server string) {
	l := &m.st.Layout
	switch {
	case !slices.ContainsFunc(l.Backup, func(s ring.Server) bool { return s.ID == server }):
		return
	case len(l.Backup) == 1:
		m.leaveTiers(server, "the last BackupPS "+server+" restarted")
	default:
		m.removeTiered(server, "")
	}
	m.note(api.EventFailed, server, "BackupPS restarted: it holds nothing, so it leaves the backup ring and joins again")
}

// joinStandby puts a server that joins a running tiered cluster on
// standby when its class has no data role in the stage: a transient one
// in stage 1, a reliable one in stages 2 and 3 (a new BackupPS would miss
// the slots nobody pushes to; it waits for the next switch to stage 1).
func (m *Machine) joinStandby(s ring.Server) bool {
	l := &m.st.Layout
	if !l.Ready || m.cfg.Stage == 0 {
		return false
	}
	if (l.CurrentStage() == tier.Stage1) == (s.Class == tier.Reliable) {
		return false
	}
	l.Standby = append(slices.Clone(l.Standby), s)
	if s.Class == tier.Transient && m.cfg.Stage > tier.Stage1 && l.Switch == nil && len(l.Joining) == 0 && len(l.Leaving) == 0 {
		// Back to the stage asked for once transient machines return
		// after a fallback.
		if err := m.switchStage(m.cfg.Stage, "transient machine "+s.Machine+" returned"); err == nil {
			return true
		}
	}
	m.publish()
	return true
}

// arrangeTiers places the servers by class once the cluster forms: before
// then no server holds state, so the placement is free. Stage 1: reliable
// servers on the ring, transient ones on standby; stages 2 and 3:
// transient servers are the ActivePS (the ring), reliable ones BackupPS.
func (m *Machine) arrangeTiers() {
	l := &m.st.Layout
	stage := m.cfg.Stage
	if stage == 0 {
		return
	}
	var rel, tra []ring.Server
	for _, s := range l.Servers {
		if s.Class == tier.Transient {
			tra = append(tra, s)
		} else {
			rel = append(rel, s)
		}
	}
	if err := stage.Formable(len(rel), len(tra)); err != nil {
		m.log.Error("stage cannot be formed; running stage 1", "stage", stage, "err", err)
		stage = tier.Stage1
	}
	if len(rel) == 0 {
		rel, tra = tra, nil
	}
	l.Stage = stage
	if stage == tier.Stage1 {
		l.Servers, l.Standby, l.Backup = rel, tra, nil
	} else {
		l.Servers, l.Backup, l.Standby = tra, rel, nil
	}
	m.newEpoch()
	m.st.StageIntact = stage >= tier.Stage2
}

// leaveTiered lets a tiered cluster's server that is off the data ring
// leave on notice, and reports whether it answered: a standby (it holds
// nothing), a BackupPS whose slots other BackupPS hold, and a reliable
// server joining the ring in a switch to stage 1 beside others, each at
// once, as its failure would take it out (removeTiered, removeServer),
// but as a planned exit. The only BackupPS takes the cluster out of the
// tiers as it goes (leaveTiers); the only reliable joiner of a switch to
// stage 1 is refused as the last server on the ring is: it holds the one
// authoritative copy. Refused as "not on the ring", each exited 1 and
// was recorded as failed (a BackupPS SIGTERMed in stage 2).
func (m *Machine) leaveTiered(id uint64, server string) bool {
	l := &m.st.Layout
	if sw := l.Switch; sw != nil && sw.From == tier.Stage1 && slices.Contains(l.Leaving, server) {
		return m.leaveSwitchFromStage1(id, server)
	}
	is := func(s ring.Server) bool { return s.ID == server }
	reliableJoiners := 0
	if sw := l.Switch; sw != nil && sw.To == tier.Stage1 {
		for _, s := range l.Joining {
			if s.Class == tier.Reliable {
				reliableJoiners++
			}
		}
	}
	var why string
	switch {
	case slices.ContainsFunc(l.Standby, is):
		why = "standby server left: it held nothing"
	case slices.ContainsFunc(l.Backup, is) && len(l.Backup) > 1:
		why = "BackupPS left: the other BackupPS hold its slots' authoritative copies"
	case slices.ContainsFunc(l.Backup, is) && l.Switch == nil:
		m.leaveTiers(server, "eviction notice of the last BackupPS "+server)
		m.note(api.EventLeft, server, "the last BackupPS left after the cluster left the tiers: the ActivePS hold every acknowledged update")
		m.replyLayout(id)
		return true
	case slices.ContainsFunc(l.Backup, is) || reliableJoiners == 1 && slices.ContainsFunc(l.Joining, is):
		m.fail(id, fmt.Errorf("%w: %s: it holds the only authoritative copy of the slots (the last BackupPS)", api.ErrLastServer, server))
		return true
	case reliableJoiners > 1 && slices.ContainsFunc(l.Joining, is):
		why = "reliable server left the switch to stage 1: the other reliable servers take its slots"
	default:
		return false
	}
	m.removeServer(server, "")
	m.note(api.EventLeft, server, why)
	m.replyLayout(id)
	return true
}

// leaveTiers takes the cluster out of the tiers when server, its last
// BackupPS, goes (for reason: its notice, its death, its restart): stage
// 1 on the ActivePS ring as it stands, without BackupPS, in one epoch;
// reliable servers on standby join that ring.
// Durability is lost, and said so. The ActivePS hold every acknowledged
// update, chain-replicated (an ActivePS acknowledges a push only once
// its chain has it), so nothing is lost; they stop streaming to the
// server and release the acknowledgements that waited for its ledger
// (dropReplicators), the pushes applied once. Kept in the layout
// instead (refused on notice, or dead), the ActivePS held their
// acknowledgements for it for good: the job stood still. A switch back
// into the tiers needs a reliable ring (switchStage).
func (m *Machine) leaveTiers(server, reason string) {
	l := &m.st.Layout
	from := l.CurrentStage()
	l.Backup, l.Stage = nil, tier.Stage1
	m.st.StageIntact = false
	// Reliable servers waiting on standby for a switch to stage 1 join
	// its ring by the ordinary join.
	var standby []ring.Server
	for _, s := range l.Standby {
		if s.Class != tier.Reliable || m.addServer(s) != nil {
			standby = append(standby, s)
		}
	}
	l.Standby = standby
	m.st.Removed++
	m.st.StageHistory = append(m.st.StageHistory, StageChange{From: from, To: tier.Stage1, Reason: reason, Started: m.now, Done: m.now})
	m.note(api.EventStage, server, fmt.Sprintf("left the tiers %d -> 1: %s; durability lost: the ActivePS are the ring, with nothing reliable behind them until a reliable server joins", from, reason))
	m.log.Warn("leaving the tiers: the last BackupPS is gone; durability lost: the ActivePS serve as stage 1's ring, with no reliable copy", "from", from, "server", server, "reason", reason)
	m.newEpoch()
	m.resetSync()
	m.publish()
}

// leaveSwitchFromStage1 answers a reliable server that asks to leave while
// a switch from stage 1 makes it a BackupPS: it is noticed, and leaves
// when the switch ends (promoteSwitch), if another BackupPS stays. Told
// that it was leaving already, it became a BackupPS, found itself off
// the ring and exited, to be found failed (or, the only one, kept in the
// layout as the authoritative copy it no longer held).
func (m *Machine) leaveSwitchFromStage1(id uint64, server string) bool {
	l := &m.st.Layout
	staying := 0
	for _, s := range l.Servers {
		if slices.Contains(l.Leaving, s.ID) && s.ID != server && !m.st.Noticed[s.ID] {
			staying++
		}
	}
	if staying == 0 {
		m.fail(id, fmt.Errorf("%w: %s: it will hold the only authoritative copy of the slots (the last BackupPS of the switch to stage %d)", api.ErrLastServer, server, l.Switch.To))
		return true
	}
	if m.st.Noticed == nil {
		m.st.Noticed = map[string]bool{}
	}
	if !m.st.Noticed[server] {
		m.st.Noticed[server] = true
		m.note(api.EventDrain, server, fmt.Sprintf("server asked to leave during the switch to stage %d: it leaves when the switch ends", l.Switch.To))
		m.dirty = true
	}
	m.replyLayout(id)
	return true
}

// removeTiered takes a failed server out when the tiers are involved, and
// reports whether it handled it: a BackupPS or a standby server leaves its
// list; losing an ActivePS without notice falls back to stage 1 once k of
// them are lost (some slot may then have lost every ActivePS copy) or none
// is left.
func (m *Machine) removeTiered(id, addr string) (handled, removed bool) {
	l := &m.st.Layout
	match := func(s ring.Server) bool { return s.ID == id && (addr == "" || s.Addr == addr) }
	if i := slices.IndexFunc(l.Standby, match); i >= 0 {
		l.Standby = slices.Delete(slices.Clone(l.Standby), i, i+1)
		m.st.Removed++
		m.publish()
		return true, true
	}
	if i := slices.IndexFunc(l.Backup, match); i >= 0 {
		if len(l.Backup) == 1 {
			// The last one: out of the tiers, as on its notice. Kept in
			// the layout for a process restarted under its ID (which
			// would hold nothing), it stood the job still: the ActivePS
			// held their acknowledgements for it for good.
			m.leaveTiers(id, "the last BackupPS "+id+" failed")
			return true, true
		}
		l.Backup = slices.Delete(slices.Clone(l.Backup), i, i+1)
		m.st.Removed++
		m.newEpoch()
		m.resetSync()
		m.publish()
		return true, true
	}
	if l.CurrentStage() == tier.Stage1 && l.Switch == nil {
		return false, false
	}
	onRing := slices.ContainsFunc(l.Servers, match)
	joining := slices.ContainsFunc(l.Joining, match)
	if !onRing && !joining {
		return false, false
	}
	dead := l.Servers[0]
	if onRing {
		dead = l.Servers[slices.IndexFunc(l.Servers, match)]
	}
	if dead.Class != tier.Transient && !joining {
		return false, false
	}
	if sw := l.Switch; sw != nil && sw.From == tier.Stage1 {
		// A switch from stage 1 that loses a joining ActivePS is
		// abandoned: the reliable heads still hold everything.
		m.abandonSwitch(id)
		return true, true
	}
	if !onRing {
		return false, false
	}
	m.st.ActiveLost++
	active := len(l.Servers) - 1
	if active > 0 && m.st.ActiveLost < l.K() {
		return false, false
	}
	m.fallback(id, "revocation: lost "+fmt.Sprint(m.st.ActiveLost)+" ActivePS without notice")
	return true, true
}

// fallback switches to stage 1 at once: the BackupPS become the ring with
// the state their last durable rounds gave them. Updates the lost ActivePS
// acknowledged after those rounds are lost (bounded by the gate to one
// sync interval's worth). Surviving ActivePS go on standby.
func (m *Machine) fallback(dead, reason string) {
	l := &m.st.Layout
	from := l.CurrentStage()
	var standby []ring.Server
	for _, s := range l.Servers {
		if s.ID != dead {
			standby = append(standby, s)
		}
	}
	for _, s := range l.Joining {
		if s.ID != dead {
			standby = append(standby, s)
		}
	}
	if len(l.Backup) == 0 {
		// A switch 2 -> 1 in progress had moved the BackupPS to Joining.
		for _, s := range l.Joining {
			if s.Class == tier.Reliable {
				l.Backup = append(l.Backup, s)
			}
		}
		standby = slices.DeleteFunc(standby, func(s ring.Server) bool { return s.Class == tier.Reliable })
	}
	l.Servers, l.Backup, l.Joining, l.Leaving = l.Backup, nil, nil, nil
	l.Standby = append(slices.Clone(l.Standby), standby...)
	m.st.LossPending = nil
	for _, s := range l.Servers {
		m.st.LossPending = append(m.st.LossPending, s.ID)
	}
	l.Stage, l.Switch = tier.Stage1, nil
	for j := range m.st.Synced {
		delete(m.st.Synced, j)
	}
	m.st.Removed++
	m.st.ActiveLost = 0
	m.st.StageHistory = append(m.st.StageHistory, StageChange{From: from, To: tier.Stage1, Reason: reason, Started: m.now, Done: m.now})
	m.note(api.EventStage, dead, fmt.Sprintf("fell back %d -> 1: %s", from, reason))
	m.log.Warn("falling back to stage 1", "from", from, "reason", reason)
	m.newEpoch()
	m.resetSync()
	m.publish()
}

// abandonSwitch gives up a switch from stage 1 whose joiner id died: the
// joiners go back on standby (without id), the reliable servers stay. The
// switch starts again at once with the transient servers left, if any:
// the only other trigger is another transient machine joining, and
// without one the job would stay in stage 1 beside live ActivePS.
func (m *Machine) abandonSwitch(id string) {
	l := &m.st.Layout
	to := l.Switch.To
	for _, s := range l.Joining {
		if s.ID != id {
			l.Standby = append(l.Standby, s)
		}
		delete(m.st.Synced, s.ID)
	}
	for _, s := range l.Leaving {
		delete(m.st.Synced, s)
	}
	m.st.StageHistory = append(m.st.StageHistory, StageChange{From: l.Switch.From, To: l.Switch.From,
		Reason: "abandoned: ActivePS " + id + " lost during the switch to " + l.Switch.To.String(), Started: m.now, Done: m.now})
	m.note(api.EventStage, id, m.st.StageHistory[len(m.st.StageHistory)-1].Reason)
	l.Joining, l.Leaving, l.Switch = nil, nil, nil
	m.st.Removed++
	m.resetSync()
	if m.switchStage(to, "retried without ActivePS "+id) == nil {
		return // published
	}
	m.publish()
}

// SwitchStage starts a live switch to stage to (request id), at the next
// clock boundary the servers see: 1 -> 2 or 3 fills the ActivePS from the
// reliable heads by the two-phase handoff and moves the heads in one
// epoch; 2 or 3 -> 1 copies every slot from the ActivePS heads to the
// BackupPS the same way and moves the heads back; 2 <-> 3 only changes
// where workers may train.
func (m *Machine) SwitchStage(id uint64, to tier.Stage, reason string) {
	if err := m.switchStage(to, reason); err != nil {
		m.fail(id, err)
		return
	}
	m.replyLayout(id)
}

func (m *Machine) switchStage(to tier.Stage, reason string) error {
	l := &m.st.Layout
	from := l.CurrentStage()
	switch {
	case !to.Valid():
		return fmt.Errorf("%w: stage %d: %w", ErrStage, to, tier.ErrUnknownStage)
	case !l.Ready:
		return fmt.Errorf("%w: the cluster has not formed", ErrStage)
	case m.cfg.Stage == 0:
		return fmt.Errorf("%w: the cluster runs without tiers (start the coordinator with a stage)", ErrStage)
	case l.Switch != nil:
		return fmt.Errorf("%w: a switch %d -> %d is in progress", ErrStage, l.Switch.From, l.Switch.To)
	case m.st.Regather != 0:
		return fmt.Errorf("%w: the transient servers are draining to standby for a switch 1 -> %d", ErrStage, m.st.Regather)
	case len(l.Joining) > 0 || len(l.Leaving) > 0:
		return fmt.Errorf("%w: servers are joining or leaving", ErrStage)
	case from == to:
		return nil
	}
	sw := &layout.Switch{From: from, To: to, Reason: reason, StartedUnixMilli: m.now.UnixMilli()}
	switch {
	case from >= tier.Stage2 && to >= tier.Stage2:
		l.Stage = to
		m.st.StageHistory = append(m.st.StageHistory, StageChange{From: from, To: to, Reason: reason, Started: m.now, Done: m.now})
		m.note(api.EventStage, "", fmt.Sprintf("switched %d -> %d: %s", from, to, reason))
		m.publish()
		return nil
	case from == tier.Stage1 && slices.ContainsFunc(l.Servers, func(s ring.Server) bool { return s.Class == tier.Transient }):
		// Left the tiers when the last BackupPS went (leaveTiers), or
		// formed without a reliable server: its ring cannot become the
		// BackupPS, on machines that may go at once. Its slots are
		// gathered onto its reliable servers first.
		return m.gatherForTiers(to, reason)
	case from == tier.Stage1:
		var tra []ring.Server
		for _, s := range l.Standby {
			if s.Class == tier.Transient {
				tra = append(tra, s)
			}
		}
		if err := to.Formable(len(l.Servers), len(tra)); err != nil {
			return fmt.Errorf("%w: %v", ErrStage, err)
		}
		l.Standby = slices.DeleteFunc(slices.Clone(l.Standby), func(s ring.Server) bool { return s.Class == tier.Transient })
		l.Joining = tra
		for _, s := range l.Servers {
			l.Leaving = append(l.Leaving, s.ID)
		}
	default: // 2 or 3 -> 1
		if len(l.Backup) == 0 {
			return fmt.Errorf("%w: no BackupPS to take the slots", ErrStage)
		}
		l.Joining, l.Backup = l.Backup, nil
		for _, s := range l.Servers {
			l.Leaving = append(l.Leaving, s.ID)
		}
		sw.Flush = m.st.StageIntact
	}
	for _, s := range l.Joining {
		m.st.Synced[s.ID] = map[string]bool{}
	}
	for _, s := range l.Leaving {
		m.st.Synced[s] = map[string]bool{}
	}
	l.Switch = sw
	m.st.StageHistory = append(m.st.StageHistory, StageChange{From: from, To: to, Reason: reason, Started: m.now})
	m.note(api.EventStage, "", fmt.Sprintf("switch %d -> %d begins: %s", from, to, reason))
	m.resetSync()
	m.publish()
	return nil
}

// gatherForTiers begins the way back into the tiers from a stage-1 ring
// that holds transient servers (docs/design/tiers.md, "Back into the
// tiers"): they drain off the ring by the ordinary drain, every slot going
// to the reliable servers, and go to standby (promote); the switch to
// stage to follows at the next tick (returnToTiers), from a ring of
// reliable servers alone, as any switch from stage 1.
func (m *Machine) gatherForTiers(to tier.Stage, reason string) error {
	l := &m.st.Layout
	var rel, tra []string
	for _, s := range l.Servers {
		if s.Class == tier.Transient {
			tra = append(tra, s.ID)
		} else {
			rel = append(rel, s.ID)
		}
	}
	if len(rel) == 0 {
		return fmt.Errorf("%w: the ring holds transient servers only: no reliable server to gather its slots and become the BackupPS", ErrStage)
	}
	standby := 0
	for _, s := range l.Standby {
		if s.Class == tier.Transient {
			standby++
		}
	}
	if err := to.Formable(len(rel), len(tra)+standby); err != nil {
		return fmt.Errorf("%w: %v", ErrStage, err)
	}
	l.Leaving = tra
	for _, id := range tra {
		m.st.Synced[id] = map[string]bool{}
	}
	m.st.Regather = to
	m.note(api.EventStage, "", fmt.Sprintf("back into the tiers, 1 -> %d: the transient servers %v drain to standby, every slot gathered onto the reliable servers %v, then the switch: %s", to, tra, rel, reason))
	m.log.Info("back into the tiers: the transient servers drain to standby, every slot gathered onto the reliable servers, then the switch", "stage", to, "transient", tra, "reliable", rel, "reason", reason)
	m.resetSync()
	m.publish()
	return nil
}

// gathered reports whether server, a transient server drained off the
// ring by a gather, goes to standby rather than out of the cluster: it
// was not noticed meanwhile.
func (m *Machine) gathered(s ring.Server) bool {
	return m.st.Regather != 0 && s.Class == tier.Transient && !m.st.Noticed[s.ID]
}

// noticeGathered records that server, a transient server a gather drains,
// was noticed: it leaves at the gather's end instead of going to standby.
func (m *Machine) noticeGathered(server string) {
	if m.st.Noticed == nil {
		m.st.Noticed = map[string]bool{}
	}
	m.st.Noticed[server] = true
	m.dirty = true
}

// cancelGather takes a gather back when the ring is left without a
// reliable server to gather onto, but except (its last one lost or
// leaving): the transient servers' drains end and the cluster stays in
// stage 1 on its ring. It reports whether it did.
func (m *Machine) cancelGather(except, why string) bool {
	l := &m.st.Layout
	if m.st.Regather == 0 || slices.ContainsFunc(l.Servers, func(s ring.Server) bool {
		return s.Class != tier.Transient && s.ID != except && !slices.Contains(l.Leaving, s.ID)
	}) {
		return false
	}
	l.Leaving = slices.DeleteFunc(slices.Clone(l.Leaving), func(id string) bool {
		if i := slices.IndexFunc(l.Servers, func(s ring.Server) bool { return s.ID == id }); i >= 0 && l.Servers[i].Class == tier.Transient && !m.st.Noticed[id] {
			delete(m.st.Synced, id)
			return true
		}
		return false
	})
	m.note(api.EventStage, "", fmt.Sprintf("the way back into stage %d is cancelled: %s; stage 1 goes on on its ring", m.st.Regather, why))
	m.log.Warn("the way back into the tiers is cancelled: no reliable server left on the ring to gather the slots onto", "stage", m.st.Regather, "why", why)
	m.st.Regather = 0
	m.dirty = true
	m.resetSync()
	return true
}

// returnToTiers, at each tick, moves a tiered cluster that runs stage 1 on
// a ring with transient servers back into its stage: once its transient
// servers are gathered to standby (Regather), it begins the switch; and a
// cluster started with a stage above 1 whose ring holds a reliable server
// beside transient ones (it left the tiers when its last BackupPS went,
// and a reliable server joined since) begins the gather.
func (m *Machine) returnToTiers() {
	l := &m.st.Layout
	if m.cfg.Stage <= tier.Stage1 || !l.Ready || l.JobDone || l.Switch != nil || len(l.Joining) > 0 || len(l.Leaving) > 0 || l.CurrentStage() != tier.Stage1 {
		return
	}
	if to := m.st.Regather; to != 0 {
		m.st.Regather, m.st.Noticed = 0, nil
		m.dirty = true
		if err := m.switchStage(to, "back into the tiers: every slot gathered onto the reliable servers"); err != nil {
			m.note(api.EventStage, "", fmt.Sprintf("the switch back into stage %d after the gather is refused: %v; stage 1 goes on on the reliable servers", to, err))
			m.log.Warn("the switch back into the tiers after the gather is refused", "stage", to, "err", err)
		}
		return
	}
	tra := slices.ContainsFunc(l.Servers, func(s ring.Server) bool { return s.Class == tier.Transient })
	rel := slices.ContainsFunc(l.Servers, func(s ring.Server) bool { return s.Class != tier.Transient })
	if tra && rel {
		if err := m.gatherForTiers(m.cfg.Stage, "a reliable server is on the ring again"); err != nil {
			m.log.Debug("no way back into the tiers yet", "err", err)
		}
	}
}

// noticeTiered handles an eviction notice of ActivePS server (a drained
// departure): when every ActivePS (and every server joining them) is
// leaving, the cluster switches to stage 1, the ActivePS shipping every
// slot to the BackupPS first, so that nothing is lost. Notices of a
// class arrive one server at a time: the first ones drain within the
// ActivePS ring, and the last turns their drains into the switch. It
// reports whether it handled the departure.
func (m *Machine) noticeTiered(server string) bool {
	l := &m.st.Layout
	if l.CurrentStage() == tier.Stage1 || l.Switch != nil {
		return false
	}
	if m.st.Noticed == nil {
		m.st.Noticed = map[string]bool{}
	}
	m.st.Noticed[server] = true
	staying := 0
	for _, s := range l.Servers {
		if !m.st.Noticed[s.ID] && !slices.Contains(l.Leaving, s.ID) {
			staying++
		}
	}
	for _, s := range l.Joining {
		if !m.st.Noticed[s.ID] {
			staying++
		}
	}
	if staying > 0 || len(l.Backup) == 0 {
		// Without BackupPS (every one lost) there is nothing to switch
		// to: the drains go on within the ActivePS ring as far as they
		// can, and keepFinalRing keeps a server on it.
		return false
	}
	// The drains and joins under way give way to the switch: noticed
	// joiners hold nothing that is not on the ring, and the switch ships
	// every slot of the leaving ActivePS.
	for _, s := range l.Joining {
		delete(m.st.Synced, s.ID)
	}
	for _, id := range l.Leaving {
		delete(m.st.Synced, id)
	}
	l.Joining, l.Leaving = nil, nil
	if err := m.switchStage(tier.Stage1, "eviction notice: every ActivePS is leaving"); err != nil {
		m.log.Error("cannot switch to stage 1 on notice", "err", err)
		return false
	}
	return true
}

// promoteSwitch finishes the switch in progress once every joiner and
// leaver of its group is synced, in one epoch: leavers go to the BackupPS
// (from stage 1) or on standby (to stage 1), or out if they had notice.
// It reports false while the group is not done.
func (m *Machine) promoteSwitch(done func(string) bool) bool {
	l := &m.st.Layout
	for _, j := range l.Joining {
		if !done(j.ID) {
			return false
		}
	}
	for _, id := range l.Leaving {
		if !done(id) {
			return false
		}
	}
	var leavers []ring.Server
	for _, s := range l.Servers {
		if slices.Contains(l.Leaving, s.ID) {
			leavers = append(leavers, s)
		}
	}
	l.Servers = slices.Clone(l.Joining)
	if l.Switch.To >= tier.Stage2 {
		l.Backup = nil
		for _, s := range leavers {
			if m.st.Noticed[s.ID] {
				m.st.Removed++
				m.note(api.EventLeft, s.ID, "server left as the switch ended: the other BackupPS hold its slots")
				continue
			}
			l.Backup = append(l.Backup, s)
		}
	} else {
		for _, s := range leavers {
			if m.st.Noticed[s.ID] {
				// Said and kept in Gone: the status left every ActivePS
				// evicted with notice out, as if it had never been.
				m.st.Removed++
				m.note(api.EventLeft, s.ID, "server left as the switch to stage 1 ended: the reliable servers, now the ring, hold its slots")
				continue
			}
			l.Standby = append(l.Standby, s)
		}
	}
	for _, s := range l.Joining {
		delete(m.st.Synced, s.ID)
	}
	for _, s := range l.Leaving {
		delete(m.st.Synced, s)
	}
	l.Stage = l.Switch.To
	if n := len(m.st.StageHistory); n > 0 && m.st.StageHistory[n-1].Done.IsZero() {
		m.st.StageHistory[n-1].Done = m.now
	}
	m.note(api.EventStage, "", fmt.Sprintf("switched %d -> %d: the heads moved", l.Switch.From, l.Switch.To))
	l.Joining, l.Leaving, l.Switch = nil, nil, nil
	m.st.Noticed, m.st.ActiveLost = nil, 0
	if l.Stage >= tier.Stage2 {
		// Transient machines that joined during the switch join the
		// ActivePS now, by the ordinary two-phase join.
		for _, s := range l.Standby {
			if s.Class == tier.Transient {
				l.Joining = append(l.Joining, s)
				m.st.Synced[s.ID] = map[string]bool{}
			}
		}
		l.Standby = slices.DeleteFunc(l.Standby, func(s ring.Server) bool { return s.Class == tier.Transient })
	}
	m.newEpoch()
	m.resetSync()
	// The BackupPS, the old heads, hold every slot in full; a join that
	// starts with the epoch changes heads, so it is not intact.
	m.st.StageIntact = l.Stage >= tier.Stage2 && len(l.Joining) == 0
	return true
}

// Stage returns the stage the cluster runs and the switches so far.
func (m *Machine) Stage() (tier.Stage, []StageChange) {
	return m.st.Layout.CurrentStage(), slices.Clone(m.st.StageHistory)
}

// trains reports whether the stage lets rank take new pieces: in stage 3
// workers on reliable machines take none (they finish the piece they hold
// and then wait, idle on the servers' clocks, until a switch back), as
// long as a transient worker is alive to train. With none (revoked,
// drained, or replaced by reliable ones), the job would wait for work
// forever; the reliable workers train until a transient one joins.
func (m *Machine) trains(rank int) bool {
	if m.cfg.Stage == 0 || m.st.Layout.CurrentStage() != tier.Stage3 || m.st.RankClass[rank] == tier.Transient {
		return true
	}
	return !m.transientTrainer()
}

// transientTrainer reports whether a worker on a transient machine is
// alive and has work left: joined, not declared dead or departed, not
// done with its job.
func (m *Machine) transientTrainer() bool {
	for _, r := range m.st.Workers {
		if m.st.RankClass[r] != tier.Transient || m.finished(r) {
			continue
		}
		if _, reported := m.st.Reports[r]; !reported {
			return true
		}
	}
	return false
}
