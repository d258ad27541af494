package coord

import (
	"fmt"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// A layout's final ring (Layout.Final: the ring without its leaving
// servers and with its joining ones) is where every slot goes once the
// moves under way are done. Every server refuses a layout whose final
// ring is empty ("ring: no servers") and its process ends, the BackupPS
// too: the whole cluster is gone. Drains are refused when they would
// leave the ring without a server, but a failure or a departure that
// takes the last server staying, while every other one is draining, can
// still leave none (the simulation's tier seed 610: a class-wide notice
// reaching the ActivePS one server at a time, the job's end between
// them). keepFinalRing is run before such a layout is published.

// keepFinalRing makes sure the final ring of the layout about to be
// published has a server: with every ActivePS leaving and BackupPS to
// take the slots, the drains become a switch to stage 1 (as a
// class-wide notice does); during a switch with nobody left to switch
// to, the switch is abandoned; otherwise the last leave is cancelled, and
// that server stays on the ring until it goes (a drain whose deadline
// runs out leaves anyway, and is then taken out as failed).
func (m *Machine) keepFinalRing() {
	l := &m.st.Layout
	if len(l.Servers) == 0 || len(l.Joining) > 0 ||
		slices.ContainsFunc(l.Servers, func(s ring.Server) bool { return !slices.Contains(l.Leaving, s.ID) }) {
		return
	}
	if l.Switch != nil {
		m.abandonEmptySwitch()
		return
	}
	if l.CurrentStage() != tier.Stage1 && len(l.Backup) > 0 {
		leaving := l.Leaving
		for _, id := range leaving {
			delete(m.st.Synced, id)
		}
		l.Leaving = nil
		if err := m.switchStage(tier.Stage1, "every ActivePS is leaving"); err == nil {
			return
		}
		l.Leaving = leaving
		for _, id := range leaving {
			m.st.Synced[id] = map[string]bool{}
		}
	}
	last := l.Leaving[len(l.Leaving)-1]
	l.Leaving = slices.Clone(l.Leaving[:len(l.Leaving)-1])
	delete(m.st.Synced, last)
	m.log.Warn("a drain is cancelled: the ring would have no server left", "server", last)
	m.note(api.EventDrain, last, "drain cancelled: every other server of the ring is leaving or gone")
}

// abandonEmptySwitch gives up the switch in progress when its final ring
// is empty (every joiner of the new stage lost, every server of the old
// one leaving): the servers of the data ring stay where they are, in the
// stage the switch started from.
func (m *Machine) abandonEmptySwitch() {
	l := &m.st.Layout
	for _, id := range l.Leaving {
		delete(m.st.Synced, id)
	}
	sw := l.Switch
	m.st.StageHistory = append(m.st.StageHistory, StageChange{From: sw.From, To: sw.From,
		Reason: fmt.Sprintf("abandoned: every server to take the slots in stage %d lost during the switch", sw.To), Started: m.now, Done: m.now})
	m.note(api.EventStage, "", m.st.StageHistory[len(m.st.StageHistory)-1].Reason)
	m.log.Warn("switch abandoned: nobody left to switch to", "from", sw.From, "to", sw.To)
	l.Leaving, l.Switch = nil, nil
}

// leaveJoining takes a joining server that got an eviction notice out of
// the joiners at once (it holds nothing the ring lacks: a pre-copy), and
// reports whether server was one. A switch's joiners stay: the switch is
// abandoned or falls back when they go.
func (m *Machine) leaveJoining(server string) bool {
	l := &m.st.Layout
	i := slices.IndexFunc(l.Joining, func(s ring.Server) bool { return s.ID == server })
	if i < 0 || l.Switch != nil {
		return false
	}
	l.Joining = slices.Delete(slices.Clone(l.Joining), i, i+1)
	delete(m.st.Synced, server)
	m.note(api.EventDrain, server, "joining server asked to leave: it leaves the joiners at once")
	m.keepFinalRing()
	m.resetSync()
	m.publish()
	return true
}
