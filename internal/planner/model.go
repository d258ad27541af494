package planner

import (
	"math"

	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// resource is something every update uses a share of: a class's link in
// one direction, the workers' or the heads' processors, BackupPS ingest,
// the host's processors.
type resource struct {
	name     string
	capacity float64 // per second, in the resource's unit
	// fixed is used per second whatever the update rate: the stream when
	// it sends the whole model every interval.
	fixed float64
	// load is what one update of a worker on a machine of each class
	// uses, in the resource's unit.
	load [len(tier.Classes)]float64
	// compute marks a class's workers' processors: the flow's upper bound.
	compute bool
}

func (r resource) used() bool { return r.fixed > 0 || r.load[0] > 0 || r.load[1] > 0 }

// workers is the number of workers on machines of class c in stage s.
func workers(s tier.Stage, m Measurements, c tier.Class) int {
	if s == tier.Stage3 && c == tier.Reliable {
		return 0
	}
	return m.machines(c) * m.workersPerMachine()
}

// heads is the class and number of the servers that head slots, the ones
// workers push to: servers on reliable machines in stage 1, ActivePS on
// transient ones in stages 2 and 3.
func heads(s tier.Stage, m Measurements) (tier.Class, int) {
	if s == tier.Stage1 {
		return tier.Reliable, m.Reliable
	}
	return tier.Transient, m.Transient
}

// resources lists what stage s uses per update, with one server (ActivePS
// or BackupPS) per machine of its class, slots spread evenly over them,
// and workers' keys spread over every head. With constStream the stream is
// the whole model every sync interval (a fixed load) instead of a load per
// update.
func resources(s tier.Stage, m Measurements, constStream bool) []resource {
	hc, nh := heads(s, m)
	kb := float64(min(m.k(), m.Reliable))
	var res []resource
	for _, c := range tier.Classes {
		if w := workers(s, m, c); w > 0 {
			compute := resource{name: "compute." + c.String(), capacity: float64(w) * m.WorkerUpdates.Of(c), compute: true}
			compute.load[c] = 1
			res = append(res, compute)
		}
	}
	out, in := links(s, m, constStream)
	ingest := resource{name: "ingest.backupps", capacity: m.BackupIngestBytes * float64(m.Reliable)}
	apply := resource{name: "apply.servers", capacity: m.ServerUpdates.Of(hc) * float64(nh)}
	if s > tier.Stage1 {
		apply.name = "apply.activeps"
	}
	host := resource{name: "host.cpu", capacity: m.HostUpdates}
	for _, c := range tier.Classes {
		if workers(s, m, c) == 0 {
			continue
		}
		apply.load[c], host.load[c] = 1, 1
		if s > tier.Stage1 && !constStream {
			ingest.load[c] = kb * m.StreamBytes
		}
	}
	if s > tier.Stage1 && constStream {
		ingest.fixed = kb * m.ModelStateBytes / m.SyncSeconds
	}
	for _, r := range append(append(out[:], in[:]...), ingest, apply, host) {
		if r.capacity > 0 && r.used() {
			res = append(res, r)
		}
	}
	return res
}

// links is what one update of each class's workers puts on each class's
// links, out and in.
func links(s tier.Stage, m Measurements, constStream bool) (out, in [len(tier.Classes)]resource) {
	hc, nh := heads(s, m)
	k := float64(min(m.k(), nh))
	kb := float64(min(m.k(), m.Reliable))
	for _, c := range tier.Classes {
		out[c] = resource{name: "link." + c.String() + ".out", capacity: m.LinkBytes.Of(c) * float64(m.machines(c))}
		in[c] = resource{name: "link." + c.String() + ".in", capacity: out[c].capacity}
	}
	for _, c := range tier.Classes {
		if workers(s, m, c) == 0 {
			continue
		}
		// A worker's keys spread over every head; the share on its own
		// machine never crosses a link.
		off := 1.0
		if c == hc {
			off = 1 - 1/float64(nh)
		}
		out[c].load[c] += m.UpBytes * off
		in[hc].load[c] += m.UpBytes * off
		out[hc].load[c] += m.DownBytes*off + (k-1)*m.ChainBytes
		in[c].load[c] += m.DownBytes * off
		in[hc].load[c] += (k - 1) * m.ChainBytes
		if s > tier.Stage1 {
			stream := kb * m.StreamBytes
			if constStream {
				stream = 0
			}
			out[tier.Transient].load[c] += stream + kb*m.LedgerBytes
			in[tier.Reliable].load[c] += stream + kb*m.LedgerBytes
		}
	}
	if s > tier.Stage1 && constStream {
		full := kb * m.ModelStateBytes / m.SyncSeconds
		out[tier.Transient].fixed, in[tier.Reliable].fixed = full, full
	}
	return out, in
}

// shares is each class's share of the updates: in lockstep every worker
// makes as many updates as every other.
func shares(s tier.Stage, m Measurements) (alpha [len(tier.Classes)]float64) {
	total := 0
	for _, c := range tier.Classes {
		total += workers(s, m, c)
	}
	for _, c := range tier.Classes {
		alpha[c] = float64(workers(s, m, c)) / float64(total)
	}
	return alpha
}

// only returns the class whose updates alone use r, if one does.
func (r resource) only() (tier.Class, bool) {
	switch {
	case r.fixed > 0:
		return 0, false
	case r.load[tier.Transient] == 0:
		return tier.Reliable, true
	case r.load[tier.Reliable] == 0:
		return tier.Transient, true
	}
	return 0, false
}

// unbounded is the capacity of edges that only give the network its shape.
const unbounded = 1e15

// limit is the total update rate at which r alone would be saturated,
// with the classes' updates in the proportions alpha.
func (r resource) limit(alpha [len(tier.Classes)]float64) float64 {
	free := math.Max(0, r.capacity-r.fixed)
	if c, ok := r.only(); ok {
		return free / (r.load[c] * alpha[c])
	}
	mixed := 0.0
	for _, c := range tier.Classes {
		mixed += alpha[c] * r.load[c]
	}
	if mixed == 0 {
		return unbounded
	}
	return free / mixed
}

// build makes the flow network of a stage's resources, in updates per
// second. Each worker class has a branch of the resources only its
// updates use (its processors, the link of a class that hosts no server);
// the branches meet, and the flow goes on through the resources every
// update shares, whose load per update is the mix of the classes' loads.
// In lockstep the source feeds each branch its fixed share of the flow
// (demand edges); otherwise each branch takes what its resources allow.
func build(res []resource, alpha [len(tier.Classes)]float64, lockstep bool) *flowNet {
	n := newFlowNet()
	merge := n.node("merge")
	chain := func(from int, rs []resource, last int, capOf func(resource) float64) {
		if len(rs) == 0 {
			n.add(flowEdge{from: from, to: last, cap: unbounded})
			return
		}
		for i, r := range rs {
			to := last
			if i < len(rs)-1 {
				to = n.node("after " + r.name)
			}
			n.add(flowEdge{name: r.name, from: from, to: to, cap: capOf(r)})
			from = to
		}
	}
	var shared []resource
	var branch [len(tier.Classes)][]resource
	for _, r := range res {
		if c, ok := r.only(); ok {
			branch[c] = append(branch[c], r)
		} else {
			shared = append(shared, r)
		}
	}
	for _, c := range tier.Classes {
		if alpha[c] == 0 {
			continue
		}
		start := source
		if lockstep {
			start = n.node("demand " + c.String())
			n.add(flowEdge{name: "demand." + c.String(), from: source, to: start, perFlow: alpha[c], demand: true})
		}
		chain(start, branch[c], merge, func(r resource) float64 { return math.Max(0, r.capacity-r.fixed) / r.load[c] })
	}
	chain(merge, shared, sink, func(r resource) float64 { return r.limit(alpha) })
	return n
}
