package coord

import (
	"fmt"
	"maps"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// Join admits a server or a worker (request id): a server's reply carries
// the layout, a worker's its rank.
func (m *Machine) Join(id uint64, j api.Join) {
	if j.Metrics != "" && m.st.Metrics[j.Role+"/"+j.ID] != j.Metrics {
		m.st.Metrics[j.Role+"/"+j.ID] = j.Metrics
		m.dirty = true
	}
	switch j.Role {
	case api.RoleServer:
		m.joinServer(id, j)
	case api.RoleWorker:
		m.joinWorker(id, j)
	default:
		m.fail(id, fmt.Errorf("%w: unknown role %q", api.ErrBadRequest, j.Role))
	}
}

// joinServer admits a server, or updates the address of a known one.
func (m *Machine) joinServer(id uint64, j api.Join) {
	l := &m.st.Layout
	if err := m.noteMachine(&j); err != nil {
		m.fail(id, err)
		return
	}
	restarted := m.incarnate(api.RoleServer, j.ID, j.Incarnation)
	if m.lastDown == j.ID+"@"+j.Addr {
		// The last server found dead is back under its ID at its
		// address (started again, or a partition healed): it is not
		// the dead server a joiner replaces (replaceDownLast). While
		// the servers load a checkpoint gone back to it loads it too;
		// a new process holds nothing (restartedServer says so).
		m.lastDown = ""
	}
	if restarted {
		// Before any layout that keeps it a member: the new process
		// holds nothing (docs/design/resilience.md, "Slots that lost
		// every copy").
		m.restartedCopies(j.ID)
		m.restartedBackup(j.ID)
	}
	srv := ring.Server{ID: j.ID, Addr: j.Addr, Machine: j.Machine, Class: j.Class}
	if m.rejoinTiered(srv) || m.joinStandby(srv) {
		m.replyLayout(id)
		return
	}
	if restarted {
		m.restartedServer(j.ID)
	}
	if i := slices.IndexFunc(l.Servers, func(s ring.Server) bool { return s.ID == j.ID }); i >= 0 {
		if l.Servers[i].Addr != j.Addr {
			l.Servers = slices.Clone(l.Servers)
			l.Servers[i].Addr = j.Addr
			m.newEpoch()
			m.resetSync()
			m.publish()
		}
		m.replyLayout(id)
		return
	}
	if i := slices.IndexFunc(l.Joining, func(s ring.Server) bool { return s.ID == j.ID }); i >= 0 {
		l.Joining = slices.Clone(l.Joining)
		l.Joining[i].Addr = j.Addr
		m.resetSync() // a restarted joiner holds nothing
		m.publish()
		m.replyLayout(id)
		return
	}
	if err := m.addServer(srv); err != nil {
		m.fail(id, err)
		return
	}
	if m.replaceDownLast() {
		if m.rewinding() {
			m.note(api.EventJoin, j.ID, "server at "+j.Addr+": it loads the checkpoint gone back to")
		} else {
			m.note(api.EventJoin, j.ID, "server at "+j.Addr+": it takes the slots of the dead last server")
		}
	} else if len(l.Joining) > 0 && l.Joining[len(l.Joining)-1].ID == j.ID {
		m.note(api.EventJoining, j.ID, "server joins a running cluster at "+j.Addr+": pre-copying its slots")
	} else {
		m.note(api.EventJoin, j.ID, "server at "+j.Addr)
	}
	m.resetSync()
	m.dropLeftRing()
	m.publish()
	m.replyLayout(id)
}

// addServer puts a new server on the ring while the cluster forms. A
// running cluster takes it in two phases: first it joins the chains of the
// slots it will hold, and the heads ship it full copies and every later
// push; once every head reports it caught up (Synced), it goes on the ring
// with a new epoch.
func (m *Machine) addServer(s ring.Server) error {
	l := &m.st.Layout
	if l.Ready || len(l.Servers) >= m.cfg.Servers {
		l.Joining = append(slices.Clone(l.Joining), s)
		if _, err := l.Final(); err != nil {
			l.Joining = l.Joining[:len(l.Joining)-1]
			return fmt.Errorf("%w: %v", api.ErrBadRequest, err)
		}
		m.st.Synced[s.ID] = map[string]bool{}
		return nil
	}
	servers := append(slices.Clone(l.Servers), s)
	if _, err := ring.New(l.Epoch+1, servers, l.VNodes); err != nil {
		return fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	l.Servers = servers
	m.newEpoch()
	return nil
}

// joinWorker admits a worker and gives it a rank; a worker that joins
// again under the same ID gets the same rank.
func (m *Machine) joinWorker(id uint64, j api.Join) {
	if err := m.noteMachine(&j); err != nil {
		m.fail(id, err)
		return
	}
	if m.incarnate(api.RoleWorker, j.ID, j.Incarnation) {
		m.retireRank(j.ID)
	}
	defer func() {
		if r, ok := m.st.Workers[j.ID]; ok && j.Class != tier.Reliable {
			if m.st.RankClass == nil {
				m.st.RankClass = map[int]tier.Class{}
			}
			m.st.RankClass[r] = j.Class
		}
	}()
	if r, ok := m.st.Workers[j.ID]; ok {
		if m.notePeer(r, j.Addr) {
			m.publish()
		}
		m.reply(Reply{ID: id, Rank: r})
		return
	}
	l := &m.st.Layout
	if len(m.st.Workers) >= m.cfg.Workers && !l.Ready {
		m.fail(id, fmt.Errorf("%w: worker %s would be number %d of %d", api.ErrFull, j.ID, len(m.st.Workers)+1, m.cfg.Workers))
		return
	}
	// A worker joining a running cluster takes a new rank; it leases
	// pieces like the others from its first request for work.
	r := len(m.st.Workers)
	m.st.Workers[j.ID] = r
	m.note(api.EventJoin, j.ID, fmt.Sprintf("worker, rank %d", r))
	l.Workers = max(l.Workers, r+1)
	m.notePeer(r, j.Addr)
	m.publish()
	m.reply(Reply{ID: id, Rank: r})
}

// restartedServer takes a ring server whose process restarted (a new
// incarnation joins under its ID) out of the ring: the new process holds
// nothing. It was kept there with its new address, so that it headed and
// served its slots empty, and once every copy's process had restarted
// (the whole cluster killed and started again) training went on from
// zero without a word. Should it be the last server on the ring, every
// copy of the ring's slots is lost: the coordinator says so, loudly (a
// checkpoint is then the only way back, --resume). Tiered clusters keep
// their own rules (rejoinTiered, removeTiered).
func (m *Machine) restartedServer(server string) {
	l := &m.st.Layout
	if !l.Ready || m.cfg.Stage != 0 || !slices.ContainsFunc(l.Servers, func(s ring.Server) bool { return s.ID == server }) {
		return
	}
	if m.removeServer(server, "") {
		m.note(api.EventFailed, server, "server restarted: it holds nothing, so its slots fall to their chains' next servers, and it joins again")
		return
	}
	m.log.Error("the last server on the ring restarted: every copy of its slots is lost; resume from a checkpoint (--resume)", "server", server)
	m.note(api.EventFailed, server, "the last server on the ring restarted: every copy of its slots is lost (resume from a checkpoint)")
}

// retireRank frees the ID of a worker that left or was declared dead in
// the running job, now that its process restarted under that ID: the old
// rank stays finished, listed as ID~rank, and the worker joins as a new
// one with the next rank. It was handed its old rank back and refused at
// its first request for work ("rank 0 was declared dead"), so a worker
// started again under a fixed --id (by systemd, say) could never rejoin.
func (m *Machine) retireRank(worker string) {
	r, ok := m.st.Workers[worker]
	if !ok || !m.st.Layout.Ready || !m.finished(r) {
		return
	}
	delete(m.st.Workers, worker)
	m.st.Workers[fmt.Sprintf("%s~%d", worker, r)] = r
	m.dirty = true
}

// notePeer records that rank's worker listens for its peers at addr (a
// worker's join's Addr), and reports whether that changed the layout.
func (m *Machine) notePeer(rank int, addr string) bool {
	l := &m.st.Layout
	if addr == "" || l.PeerAddrs[rank] == addr {
		return false
	}
	peers := maps.Clone(l.PeerAddrs)
	if peers == nil {
		peers = map[int]string{}
	}
	peers[rank] = addr
	l.PeerAddrs = peers
	return true
}

// incarnate records that node role/id is now incarnation inc (the next
// save carries it), and reports whether inc replaces another: the node's
// process restarted under its ID.
func (m *Machine) incarnate(role, id, inc string) (restarted bool) {
	key := role + "/" + id
	prev := m.st.Incarnations[key]
	if inc == "" || prev == inc {
		return false
	}
	m.st.Incarnations[key] = inc
	m.dirty = true
	return prev != ""
}

// current reports whether inc is the incarnation node role/id joined with
// last.
func (m *Machine) current(role, id, inc string) bool {
	return inc != "" && m.st.Incarnations[role+"/"+id] == inc
}

// ServerFailed takes a failed server (of address addr, "" for any) out of
// the layout: its slots fall to the next servers of their chains, which
// hold copies when the replication factor is above 1.
func (m *Machine) ServerFailed(id uint64, server, addr string) {
	if m.endedWithCluster(server) || m.leftLast(server) {
		m.reply(Reply{ID: id})
		return
	}
	l := &m.st.Layout
	// A chain of one server (--replication 1, or one server left of k)
	// holds the only copy of its slots: the next servers serve them from
	// empty. The timeline said they "fall to their chains' next servers",
	// as if nothing were lost.
	lone := m.cfg.Stage == 0 && len(l.Tables) > 0 && min(l.K(), len(l.Servers)) == 1
	removed := m.removeServer(server, addr)
	switch {
	case removed && lone:
		lost := "server does not answer pings: it held the only copy of its slots (one server a chain), which is lost; the next servers serve them from empty (a checkpoint has them: --resume)"
		m.log.Error(lost, "server", server)
		m.note(api.EventFailed, server, lost)
	case removed:
		m.note(api.EventFailed, server, "server does not answer pings: its slots fall to their chains' next servers")
	default:
		removed = m.lastServerDown(server, "does not answer pings")
	}
	m.reply(Reply{ID: id, Removed: removed})
}

// lastServerDown says that the last server on the ring stopped
// answering, and reports whether a server that joins took its place. It
// cannot be taken out alone (its slots would have nowhere to go), so the
// job waits for it or for a server to join in its place (replaceDownLast):
// a whole cluster SIGKILLed and started again on its --etcd-dir (new
// servers joining, the old ones gone) waited without a word, and the
// README's `terrace server` started again without --id (a new ID) waited
// for good as a joiner, pre-copying from the dead server.
func (m *Machine) lastServerDown(server, why string) bool {
	if m.diedAfterJob(server, why) {
		return false
	}
	l := &m.st.Layout
	if !l.Ready && !m.rewinding() || l.JobDone || m.cfg.Stage != 0 || len(l.Servers) != 1 || l.Servers[0].ID != server {
		return false
	}
	key := server + "@" + l.Servers[0].Addr
	if m.lastDown == key {
		return false // both detectors found it: said once
	}
	m.lastDown = key
	if m.rewinding() {
		// Its copy is not owed: the next server to join takes its place
		// and loads the checkpoint.
		m.log.Error("the last server on the ring "+why+" while the servers load the checkpoint gone back to: the next server to join takes its place and loads it", "server", server)
		m.note(api.EventFailed, server, "the last server on the ring "+why+" while the servers load the checkpoint gone back to: the next server to join takes its place")
	} else {
		m.log.Error("the last server on the ring "+why+": the job waits for it, or for a new server to join in its place; if it is gone, every copy of the model went with it: a server that joins takes its slots empty (--on-copies-lost resume goes back to the newest checkpoint then), or stop the coordinator and start it again with --resume and its --checkpoint-dir", "server", server)
		m.note(api.EventFailed, server, "the last server on the ring "+why+": the job waits for it or for a server to join in its place (if it is gone, every copy of the model is lost)")
	}
	if !m.replaceDownLast() {
		return false
	}
	m.publish()
	return true
}

// replaceDownLast takes the last server on the ring, found dead, off the
// ring once another server can take its place, and reports whether it
// did. The servers waiting to join go on the ring with it at once, as the
// servers of a forming cluster do: what they would pre-copy is the dead
// server's. Slots it held the only copy of (k = 1, or its chains' other
// servers failed before it) are lost, and the account of copies reports
// them (going back to the newest checkpoint with --on-copies-lost
// resume); while the servers load a checkpoint gone back to, nothing of
// its is owed (the checkpoint has every slot), and the load waited for
// its report for good (all of k + 1 servers SIGKILLed at once: the rewind
// was decided on k, the last was kept). A joiner pre-copying from the dead
// server waited for good too: the README's `terrace server` started again
// at the dead one's port without --id names itself anew.
func (m *Machine) replaceDownLast() bool {
	l := &m.st.Layout
	if m.lastDown == "" {
		return false
	}
	i := slices.IndexFunc(l.Servers, func(s ring.Server) bool { return s.ID+"@"+s.Addr == m.lastDown })
	if i < 0 || len(l.Servers) == 1 && len(l.Joining) == 0 {
		return false
	}
	down := l.Servers[i]
	m.lastDown = ""
	rewinding := m.rewinding()
	servers := slices.Delete(slices.Clone(l.Servers), i, i+1)
	for _, j := range l.Joining {
		servers = append(servers, j)
		delete(m.st.Synced, j.ID)
		if rewinding {
			m.note(api.EventRing, j.ID, "joined the ring: the servers load the checkpoint gone back to, with nothing to pre-copy")
		} else {
			m.note(api.EventRing, j.ID, "joined the ring in the place of the dead last server "+down.ID+", with nothing to pre-copy")
		}
	}
	l.Servers, l.Joining = servers, nil
	l.Leaving = slices.DeleteFunc(slices.Clone(l.Leaving), func(s string) bool { return s == down.ID })
	delete(m.st.Synced, down.ID)
	m.st.Removed++
	m.ledgerGone(down.ID, "failed")
	if rewinding {
		m.log.Warn("the last server on the ring, found dead while the servers load the checkpoint gone back to, is taken off the ring: the servers that joined load it in its place", "server", down.ID)
		m.note(api.EventFailed, down.ID, "found dead while the servers load the checkpoint gone back to: taken off the ring, the servers that joined load the checkpoint in its place")
	} else {
		m.log.Warn("the last server on the ring, found dead, is taken off the ring: the servers that joined take its slots", "server", down.ID)
		m.note(api.EventFailed, down.ID, "the last server on the ring, found dead: taken off the ring, the servers that joined take its slots")
	}
	m.newEpoch()
	m.reloadRewind(down.ID)
	m.resetSync()
	return true
}

// ServerAnswers is told that a server the monitor found dead, and kept,
// answers again. The last server on the ring said to be down is then up:
// a partition that healed, a server stopped (SIGSTOP) and continued.
func (m *Machine) ServerAnswers(id uint64, server, addr string) {
	l := &m.st.Layout
	if len(l.Servers) == 1 && m.lastDown == server+"@"+addr {
		m.lastDown = ""
		m.log.Warn("the last server on the ring answers again: the job goes on", "server", server)
	}
	if len(l.Servers) == 1 && l.Servers[0].ID == server && l.Servers[0].Addr == addr && m.st.LastLeft == server && m.st.Gone[server] == api.EventFailed {
		// Found dead after the job (diedAfterJob), and only stopped: it
		// holds the model still.
		m.st.LastLeft, m.dirty = "", true
		delete(m.st.Gone, server)
		m.log.Warn("the last server on the ring answers again after the job: the job's model is back", "server", server)
		m.note(api.EventJoin, server, "the last server on the ring answers again after the job, with the job's model")
	}
	m.reply(Reply{ID: id})
}

// serverDown reports whether s is the last server on the ring, said to
// be down and not heard from since.
func (m *Machine) serverDown(s ring.Server) bool {
	return len(m.st.Layout.Servers) == 1 && m.lastDown == s.ID+"@"+s.Addr
}

func (m *Machine) removeServer(id, addr string) bool {
	if handled, removed := m.removeTiered(id, addr); handled {
		if removed {
			m.ledgerGone(id, "failed")
		}
		return removed
	}
	l := &m.st.Layout
	match := func(s ring.Server) bool { return s.ID == id && (addr == "" || s.Addr == addr) }
	if j := slices.IndexFunc(l.Joining, match); j >= 0 {
		l.Joining = slices.Delete(slices.Clone(l.Joining), j, j+1)
		delete(m.st.Synced, id)
		m.keepFinalRing()
		m.resetSync()
		m.publish()
		return true
	}
	i := slices.IndexFunc(l.Servers, match)
	if i < 0 || len(l.Servers) == 1 {
		return false
	}
	l.Servers = slices.Delete(slices.Clone(l.Servers), i, i+1)
	l.Leaving = slices.DeleteFunc(slices.Clone(l.Leaving), func(s string) bool { return s == id })
	delete(m.st.Synced, id)
	m.newEpoch()
	m.st.Removed++
	m.ledgerGone(id, "failed")
	m.reloadRewind(id)
	m.cancelGather("", "the last reliable server on the ring, "+id+", is gone")
	m.keepFinalRing()
	// Joiners are not promoted here even if every remaining server synced
	// them: the slots the departed server headed have new heads, which
	// must ship them first (a pre-copy cut short by the failure lost them).
	m.resetSync()
	m.publish()
	return true
}

// LeaveServer starts a drained departure: the server stays on the ring
// while every head ships the slots it will no longer hold to their new
// holders, and leaves the ring once all have (promote). It fails if the
// server is not on the ring or is the last one.
func (m *Machine) LeaveServer(id uint64, server string) {
	if m.leaveAtEnd(id, server) {
		return
	}
	l := &m.st.Layout
	if m.noticeTiered(server) || m.leaveJoining(server) {
		m.replyLayout(id)
		return
	}
	if m.leaveTiered(id, server) {
		return
	}
	if !slices.ContainsFunc(l.Servers, func(s ring.Server) bool { return s.ID == server }) {
		m.fail(id, fmt.Errorf("%w: server %s is not on the ring", api.ErrBadRequest, server))
		return
	}
	if !slices.Contains(l.Leaving, server) {
		m.cancelGather(server, "the last reliable server on the ring, "+server+", is leaving")
	}
	if len(l.Servers)-len(l.Leaving) <= 1 && !slices.Contains(l.Leaving, server) && m.leaveBeforeTables(id, server) {
		return
	}
	if len(l.Servers)-len(l.Leaving) <= 1 && !slices.Contains(l.Leaving, server) {
		m.fail(id, fmt.Errorf("%w: %s: its slots have nowhere to go%s", api.ErrLastServer, server, m.checkpointOnLeave(server, true)))
		return
	}
	if m.st.Regather != 0 && slices.Contains(l.Leaving, server) {
		// A transient server of a gather, noticed: it leaves for good
		// at the gather's end instead of waiting on standby.
		m.noticeGathered(server)
	}
	if !slices.Contains(l.Leaving, server) {
		m.note(api.EventDrain, server, "server asked to leave: shipping its slots")
		l.Leaving = append(slices.Clone(l.Leaving), server)
		m.st.Synced[server] = map[string]bool{}
		m.resetSync()
		if len(l.Servers)-len(l.Leaving) < l.Replication {
			m.checkpointOnLeave(server, false)
		}
		m.publish()
	}
	m.replyLayout(id)
}

// leaveBeforeTables lets the last server on the ring leave at once before
// the job's first table, when it holds nothing: it stays on the ring, as
// after a job (leftLast), until a server that joins takes its place
// (dropLeftRing). Refused, it left anyway and the layout kept it as
// serving: the next server to join waited for good for a copy from it,
// and the cluster never formed.
func (m *Machine) leaveBeforeTables(id uint64, server string) bool {
	l := &m.st.Layout
	if len(l.Tables) > 0 || l.JobDone || m.cfg.Stage != 0 || len(l.Servers) != 1 || l.Servers[0].ID != server {
		return false
	}
	if m.st.LastLeft != server {
		m.st.LastLeft, m.dirty = server, true
		m.note(api.EventLeft, server, "the last server left before the job's first table, holding nothing: the next server to join takes its place")
	}
	m.dropLeftRing()
	m.replyLayout(id)
	return true
}

// resetSync forgets every joiner's synced reports: the ring or the joiners
// are changing in the version about to be published, and so is what each
// head must ship. Heads report again after their rebuild for it.
func (m *Machine) resetSync() {
	for j := range m.st.Synced {
		m.st.Synced[j] = map[string]bool{}
	}
	m.st.SyncFrom = m.st.Layout.Version + 1
}

// Synced records that a ring server has shipped full copies of its slots
// to the servers that hold them once the joiner (a joining or a leaving
// server) has moved; once every server on the ring has, the joiner goes on
// the ring, or off it.
func (m *Machine) Synced(id uint64, s api.Synced) {
	got := m.st.Synced[s.Joiner]
	if got != nil && s.Version >= m.st.SyncFrom && !got[s.From] {
		got[s.From] = true
		m.dirty = true
		if m.promote() {
			m.publish()
		}
	}
	m.reply(Reply{ID: id})
}

// promote moves the joiners onto the ring once all ring servers have
// synced every one of them, and takes every leaving server that all have
// synced off it, in one new epoch.
func (m *Machine) promote() bool {
	l := &m.st.Layout
	done := func(id string) bool {
		return !slices.ContainsFunc(l.Servers, func(s ring.Server) bool { return !m.st.Synced[id][s.ID] })
	}
	if l.Switch != nil {
		return m.promoteSwitch(done)
	}
	servers := slices.Clone(l.Servers)
	var joining []ring.Server
	var leaving []string
	// Joiners go on the ring together or not at all. Each is in step only
	// for the slots of its chains on the final ring (every joiner in);
	// promoted alone, one would head every slot the ring with only it
	// added gives it, among them slots whose final chains a later joiner
	// took from it, which it stopped receiving pushes for: its stale copy
	// would then overwrite the old head's newer state, acknowledged pushes
	// and all (docs/design/sim.md, seed 352). Reports arrive one ring
	// server at a time, so a joiner reported first would otherwise be
	// promoted while the others wait for their last report.
	allJoined := !slices.ContainsFunc(l.Joining, func(j ring.Server) bool { return !done(j.ID) })
	for _, j := range l.Joining {
		if !allJoined {
			joining = append(joining, j)
			continue
		}
		servers = append(servers, j)
		delete(m.st.Synced, j.ID)
		m.note(api.EventRing, j.ID, "joined the ring: every head shipped its slots")
	}
	// Leavers go off the ring together or not at all, for the same
	// reason: taken off alone, one leaves a ring on which another leaver
	// heads some of its slots, which that leaver need not hold (with k =
	// 1 it never does): as their new head it would copy its stale state
	// over the one the final holder received, acknowledged pushes and all
	// (docs/design/tiers.md, "Two drains at once with one copy").
	allLeft := !slices.ContainsFunc(l.Leaving, func(id string) bool { return !done(id) })
	var standby []ring.Server
	for _, id := range l.Leaving {
		if !allLeft {
			leaving = append(leaving, id)
			continue
		}
		if i := slices.IndexFunc(servers, func(s ring.Server) bool { return s.ID == id }); i >= 0 && m.gathered(servers[i]) {
			// A gather's transient server waits on standby for the
			// switch back into the tiers (tiers.go, gatherForTiers).
			standby = append(standby, servers[i])
			m.note(api.EventRing, id, "off the ring to standby: its slots gathered onto the reliable servers")
		} else {
			m.note(api.EventLeft, id, "drained: left the ring, its slots shipped")
			m.st.Removed++
			m.ledgerGone(id, "left")
		}
		servers = slices.DeleteFunc(servers, func(s ring.Server) bool { return s.ID == id })
		delete(m.st.Synced, id)
	}
	if len(joining) == len(l.Joining) && len(leaving) == len(l.Leaving) {
		return false
	}
	if len(standby) > 0 {
		l.Standby = append(slices.Clone(l.Standby), standby...)
	}
	l.Servers, l.Joining, l.Leaving = servers, joining, leaving
	m.newEpoch()
	m.resetSync()
	return true
}
