package coord

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// What the status and the dashboard say about the cluster as machines
// (docs/design/observe.md): each node's machine, class and part in the
// tiers, the stage and why, the spread of the workers' clocks, the
// machines alive by class and, where the prices are known, what they cost.

// noteNode records the machine node role/id runs on, for the status
// (State.Machines, saved; a node that named none runs on its own, named
// by its ID).
func (m *Machine) noteNode(j *api.Join) {
	key := j.Role + "/" + j.ID
	switch {
	case j.Machine != "" && j.Machine != j.ID:
		if m.st.Machines == nil {
			m.st.Machines = map[string]string{}
		}
		m.st.Machines[key] = j.Machine
	case m.st.Machines[key] != "":
		delete(m.st.Machines, key) // back under its ID on a machine of its own
	}
	if j.Role == api.RoleServer && m.st.LastLeft == j.ID {
		m.st.LastLeft, m.dirty = "", true // back under its ID: no longer gone
	}
}

// noteClock records the clock worker rank reported.
func (m *Machine) noteClock(rank int, clock int64, beat bool) {
	if m.clocks == nil {
		m.clocks, m.beatClocks = map[int]clockHist{}, map[int]bool{}
	}
	if beat {
		m.beatClocks[rank] = true
	} else if m.beatClocks[rank] {
		// A progress record's clock is the one it was made at, sent
		// once its pushes were acknowledged: older than the rank's
		// heartbeats, and seconds old from a slowed worker.
		return
	}
	prev := m.clocks[rank][1]
	if !prev.at.After(m.entered[rank]) {
		prev = clockSample{} // a jump to the others' clock, not a rate to interpolate
	}
	m.clocks[rank] = clockHist{prev, {clock, m.now}}
}

// enter records that rank, answered after it waited for work, enters at
// the clock the servers count it at. Until it tells its clock again, the
// one it told before it waited is left out of the spread: a worker back
// from waiting while the others trained a partition read as that far
// behind them ("staleness 51 clocks" under ssp:2, lr's minibatches of a
// partition), and interpolating across the jump read as a gap too.
func (m *Machine) enter(rank int) {
	if m.entered == nil {
		m.entered = map[int]time.Time{}
	}
	m.entered[rank] = m.now
}

// clockSample is a worker's clock as noted at a time; clockHist a
// rank's last two.
type clockSample struct {
	clock int64
	at    time.Time
}

type clockHist [2]clockSample

// clockSpread returns the spread of ranks' clocks at one instant: the
// latest by which every rank has reported, each rank's clock then
// interpolated between its last two reports. The reports come at
// different moments (heartbeats a fifth of a failure timeout apart), and
// lr's workers tick about a thousand clocks a second, so the last clocks
// as reported spread by tens under SSP(2) where the workers are within
// three (walk6, eighteenth session: 0 to 50 from one poll to the next).
func (m *Machine) clockSpread(ranks []int) int64 {
	var at time.Time
	for i, r := range ranks {
		if t := m.clocks[r][1].at; i == 0 || t.Before(at) {
			at = t
		}
	}
	var lo, hi int64
	for i, r := range ranks {
		c := m.clocks[r].at(at)
		if i == 0 {
			lo, hi = c, c
		}
		lo, hi = min(lo, c), max(hi, c)
	}
	return hi - lo
}

// at returns the clock at t: the last report's if t is not before it
// or there is no report before it, the one before's if t is not after
// that, else interpolated between the two.
func (s clockHist) at(t time.Time) int64 {
	prev, last := s[0], s[1]
	switch {
	case !t.Before(last.at) || prev.at.IsZero():
		return last.clock
	case !t.After(prev.at):
		return prev.clock
	}
	f := float64(t.Sub(prev.at)) / float64(last.at.Sub(prev.at))
	return prev.clock + int64(math.Round(f*float64(last.clock-prev.clock)))
}

// nodeMachine returns the machine and the class of a node.
func (m *Machine) nodeMachine(n *api.NodeStatus) (string, tier.Class) {
	l := &m.st.Layout
	machine := m.st.Machines[n.Role+"/"+n.ID]
	if machine == "" && n.Role == api.RoleServer {
		for _, list := range [][]ring.Server{l.Servers, l.Joining, l.Backup, l.Standby} {
			if i := slices.IndexFunc(list, func(s ring.Server) bool { return s.ID == n.ID }); i >= 0 {
				machine = list[i].Machine
			}
		}
	}
	machine = cmp.Or(machine, n.ID)
	if c, ok := l.MachineClass(machine); ok {
		return machine, c
	}
	if n.Role == api.RoleWorker {
		return machine, m.st.RankClass[n.Rank]
	}
	return machine, tier.Reliable
}

// serverTier names a server's part in a tiered cluster.
func (m *Machine) serverTier(n *api.NodeStatus) string {
	l := &m.st.Layout
	has := func(list []ring.Server) bool {
		return slices.ContainsFunc(list, func(s ring.Server) bool { return s.ID == n.ID })
	}
	switch {
	case has(l.Backup):
		return "backupps"
	case has(l.Standby):
		return "standby"
	case has(l.Servers) && l.CurrentStage() >= tier.Stage2,
		has(l.Joining) && l.Switch != nil && l.Switch.To >= tier.Stage2 && n.Class == tier.Transient:
		return "activeps"
	}
	return ""
}

// alive reports whether a node in state runs on a machine that is paid
// for.
func alive(state string) bool {
	return state != "dead" && state != "left" && state != "finished"
}

// describeTiers fills in st what the tiers add: each node's machine,
// class, part and clock, the stage's reason, the workers' clock spread
// and the machines alive by class.
func (m *Machine) describeTiers(st *api.Status) {
	l := &m.st.Layout
	machines := map[string]tier.Class{}
	var training []int
	for i := range st.Nodes {
		n := &st.Nodes[i]
		n.Machine, n.Class = m.nodeMachine(n)
		if n.Role == api.RoleServer && m.cfg.Stage != 0 {
			n.Tier = m.serverTier(n)
		}
		if h, ok := m.clocks[n.Rank]; ok && n.Role == api.RoleWorker {
			n.Clock = h[1].clock
			if n.State == "training" && h[1].at.After(m.entered[n.Rank]) {
				training = append(training, n.Rank)
			}
		}
		if alive(n.State) {
			machines[n.Machine] = n.Class
		}
	}
	st.Job.Staleness = m.clockSpread(training)
	for _, c := range machines {
		if c == tier.Transient {
			st.Machines.Transient++
		} else {
			st.Machines.Reliable++
		}
	}
	if m.cfg.Stage == 0 {
		return
	}
	switch h := m.st.StageHistory; {
	case l.Switch != nil:
		st.Switching = fmt.Sprintf("%d -> %d", l.Switch.From, l.Switch.To)
		st.StageReason = l.Switch.Reason
	case m.st.Regather != 0:
		st.Switching = fmt.Sprintf("1 -> %d", m.st.Regather)
		st.StageReason = "back into the tiers: gathering every slot onto the reliable servers first"
	case len(h) > 0:
		st.StageReason = h[len(h)-1].Reason
	case m.cfg.StageReason != "":
		st.StageReason = m.cfg.StageReason
	default:
		st.StageReason = fmt.Sprintf("formed in stage %d, as the coordinator was told", m.cfg.Stage)
	}
}

// historyCap bounds the samples the coordinator keeps: when full, every
// other one goes and the interval doubles, so that the series covers the
// whole run at a coarser grain instead of only its end.
const historyCap = 1800

// clusterMeter integrates the machines' cost over time and keeps the
// samples of the cluster for charts. It lives in the driver and starts
// again with each leader: what a run cost before a failover is not saved.
type clusterMeter struct {
	prices  tier.ByClass
	dollars float64
	perHour float64
	at      time.Time // of the last integration
	history []api.Sample
	every   time.Duration
}

func (cm *clusterMeter) priced() bool { return cm.prices.Reliable > 0 || cm.prices.Transient > 0 }

// advance adds the cost from the last call to now at the rate of then
// (the driver calls it at least once a second), and sets the rate from
// the machines alive now.
func (cm *clusterMeter) advance(now time.Time, mc api.MachineCount) {
	if !cm.at.IsZero() && now.After(cm.at) {
		cm.dollars += cm.perHour * now.Sub(cm.at).Hours()
	}
	if now.After(cm.at) {
		cm.at = now
	}
	cm.perHour = float64(mc.Reliable)*cm.prices.Reliable + float64(mc.Transient)*cm.prices.Transient
}

// record keeps st as a sample when the last one is at least the
// interval old.
func (cm *clusterMeter) record(st api.Status) {
	if cm.every == 0 {
		cm.every = time.Second
	}
	if n := len(cm.history); n > 0 && st.Time.Sub(cm.history[n-1].Time) < cm.every {
		return
	}
	if len(cm.history) >= historyCap {
		kept := cm.history[:0]
		for i := 0; i < len(cm.history); i += 2 {
			kept = append(kept, cm.history[i])
		}
		cm.history = kept
		cm.every *= 2
	}
	cm.history = append(cm.history, sampleOf(st))
}

// History returns the samples of the cluster over time, oldest first:
// about one a second, coarser in a long run, and one of now, so that a
// report taken at the end covers the run to its end.
func (c *Coordinator) History() []api.Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.statusLocked(time.Now())
	return append(slices.Clone(c.meter.history), sampleOf(now))
}

// sampleOf is st at its time: a finished job's status rate is that of its
// last minute of training, and nothing trains at st.Time.
func sampleOf(st api.Status) api.Sample {
	rate := st.Job.Rate
	if st.Definition != nil && st.Definition.Done {
		rate = 0
	}
	return api.Sample{Time: st.Time, Stage: st.Stage, Machines: st.Machines, Dollars: st.Dollars,
		Rate: rate, Staleness: st.Job.Staleness, Examples: st.Job.Examples}
}

// Notice records a worker's eviction notice on the timeline (request id);
// its leases go back when it leaves, as for any drain.
func (m *Machine) Notice(id uint64, n api.Notice) {
	if n.Role != api.RoleWorker || n.ID == "" {
		m.fail(id, fmt.Errorf("%w: a notice names a worker, not %s %q", api.ErrBadRequest, n.Role, n.ID))
		return
	}
	m.noteNotice(&n)
	m.reply(Reply{ID: id})
}

// noteNotice puts an eviction notice on the timeline, if there is one,
// once: a server that asks again to leave (after the job, while another
// drains to it: node.leaveRing) sends the same notice each time.
func (m *Machine) noteNotice(n *api.Notice) {
	if n == nil || m.noticed[n.ID] == n.Cause() {
		return
	}
	if m.noticed == nil {
		m.noticed = map[string]string{}
	}
	m.noticed[n.ID] = n.Cause()
	m.note(api.EventNotice, n.ID, n.Cause())
}
