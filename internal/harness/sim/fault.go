package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Fault is one thing that happens to the cluster. The built-in kinds are
// plain values (a kill, a join, a drain, a partition, a latency spike, a
// reset connection, a slow worker, a revocation of a class of machines);
// a new kind is a type with these two methods, built on Cluster's
// operations.
type Fault interface {
	// Apply makes the fault happen. A fault that lasts (a partition, a
	// spike) returns once it is over, or at once when ctx ends, undoing
	// itself either way.
	Apply(ctx context.Context, c *Cluster)
	String() string
}

// Timed is a fault and when it happens, after the workers start.
type Timed struct {
	At    time.Duration
	Fault Fault
}

// Schedule is a run's faults in time order. They happen one at a time: a
// fault whose time has come waits until the one before it is over.
type Schedule []Timed

func (s Schedule) String() string {
	out := make([]string, len(s))
	for i, f := range s {
		out[i] = fmt.Sprintf("%v@%v", f.Fault, f.At)
	}
	return strings.Join(out, ", ")
}

func (s Schedule) run(ctx context.Context, c *Cluster) {
	for _, f := range s {
		if !sleep(ctx, time.Until(c.start.Add(f.At))) {
			return
		}
		f.Fault.Apply(ctx, c)
	}
}

// Target names the node a fault hits: the node ID if set, else a choice
// drawn from Pick among the candidates when the fault happens (which
// nodes are alive then is not known when a schedule is drawn).
type Target struct {
	ID   string
	Pick uint64
}

func (t Target) String() string {
	if t.ID != "" {
		return t.ID
	}
	return "a node"
}

// rand returns the fault's own random source.
func (t Target) rand() *rand.Rand { return rand.New(rand.NewPCG(t.Pick, 0)) }

// choose returns t.ID, or one of ids drawn from t.Pick ("" if none).
func (t Target) choose(ids []string) string {
	if t.ID != "" {
		return t.ID
	}
	if len(ids) == 0 {
		return ""
	}
	return ids[t.rand().IntN(len(ids))]
}

func ids(ns []*Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

// KillServer kills a server at once.
//
// With KeepCopies (the random schedules) it hits only a server whose death
// leaves a complete copy of every slot (Copies), and only while more than
// k servers are on the ring and none is joining: k copies survive k − 1
// failures at a time, and no more. When no server qualifies, a server
// joins instead if one may, so that the churn goes on.
type KillServer struct {
	Target
	KeepCopies bool
	// KeepOne (without KeepCopies) hits only while another server is
	// alive: the rewind mix's kills may take the last copy of slots, not
	// every server (the last server's death is docs/open.md's, not a
	// rewind's).
	KeepOne bool
}

func (f KillServer) String() string {
	if f.ID != "" {
		return "kill " + f.ID
	}
	return "kill server"
}

func (f KillServer) Apply(ctx context.Context, c *Cluster) {
	if f.ID != "" || !f.KeepCopies {
		alive := ids(c.Alive(RoleServer))
		if f.KeepOne && len(alive) <= 1 {
			c.Note("no kill (%d servers alive): a server joins instead", len(alive))
			JoinServer{}.Apply(ctx, c)
			return
		}
		if id := f.choose(alive); id != "" {
			c.KillServer(id)
		}
		return
	}
	lay := c.Layout()
	var safe []string
	why := "a server is joining"
	if len(lay.Joining) == 0 {
		why = fmt.Sprintf("only %d servers on the ring", len(lay.Servers))
	}
	if len(lay.Servers) > lay.K() && len(lay.Joining) == 0 {
		why = "every server holds the last copy of some slot"
		for _, s := range lay.Servers {
			if c.isAlive(s.ID) && !c.copies.WouldLose(s.ID) {
				safe = append(safe, s.ID)
			}
		}
	}
	if len(safe) > 0 {
		c.KillServer(f.choose(safe))
		return
	}
	if len(lay.Servers)+len(lay.Joining) < c.cfg.MaxServers {
		c.Note("no kill (%s): a server joins instead", why)
		JoinServer{}.Apply(ctx, c)
		return
	}
	c.Note("skip %v: no kill (%s), and no join (%d servers)", f, why, c.cfg.MaxServers)
}

// JoinServer starts a new server, of Class, which joins the running
// cluster (copies first, then onto the ring). At MaxServers it joins no
// one; with ElseKill it kills a server instead (KillServer with
// KeepCopies).
type JoinServer struct {
	Class    string
	ElseKill bool
	Pick     uint64 // for the kill
}

func (f JoinServer) String() string { return "join server" }

func (f JoinServer) Apply(ctx context.Context, c *Cluster) {
	lay := c.Layout()
	if len(lay.Servers)+len(lay.Joining) >= c.cfg.MaxServers {
		if f.ElseKill {
			KillServer{Target: Target{Pick: f.Pick}, KeepCopies: true}.Apply(ctx, c)
		}
		return
	}
	jctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c.Note("FAULT join a new server")
	if _, err := c.StartServer(jctx, f.Class); err != nil && ctx.Err() == nil {
		c.Violate(KindBroken, "a new server did not join: %v", err)
	}
}

// Drain gives a node of Role an eviction notice: it has Grace to leave
// (a server hands its slots over first; a worker records its progress).
// A drained worker is replaced after Replace (never if negative). A
// server picked (not named by ID) is drained only while more than k
// servers of the ring are alive and not told to leave, and none is
// joining or leaving.
type Drain struct {
	Target
	Role    Role
	Grace   time.Duration
	Replace time.Duration
}

func (f Drain) String() string { return fmt.Sprintf("drain %v within %v", f.Target, f.Grace) }

func (f Drain) Apply(ctx context.Context, c *Cluster) {
	candidates := ids(c.Alive(f.Role))
	if f.Role == RoleServer && f.ID == "" {
		// A notice takes effect when the server asks to leave: count the
		// servers told already, not only those the layout lists.
		lay := c.Layout()
		candidates = nil
		for _, s := range lay.Servers {
			if c.isAlive(s.ID) {
				candidates = append(candidates, s.ID)
			}
		}
		if len(candidates) <= lay.K() || len(lay.Joining)+len(lay.Leaving) > 0 {
			c.Note("skip %v: %d servers of the ring stay, %d joining, %d leaving", f, len(candidates), len(lay.Joining), len(lay.Leaving))
			return
		}
	}
	id := f.choose(candidates)
	if id == "" {
		return
	}
	c.Drain(id, f.Grace)
	if f.Role == RoleWorker {
		c.Replace(f.Replace)
	}
}

// KillWorker kills a worker at once; a replacement starts after Replace
// (never if negative).
type KillWorker struct {
	Target
	Replace time.Duration
}

func (f KillWorker) String() string {
	return fmt.Sprintf("kill worker (replacement after %v)", f.Replace)
}

func (f KillWorker) Apply(ctx context.Context, c *Cluster) {
	if id := f.choose(ids(c.Alive(RoleWorker))); id != "" {
		c.KillWorker(id, f.Replace)
	}
}

// Link names two nodes ("coordinator" is one): A and B if set, else a
// pair drawn from Pick when the fault happens — a worker and a server, two
// servers, the coordinator and a server, or the coordinator and a worker.
type Link struct {
	A, B string
	Pick uint64
}

func (l Link) choose(c *Cluster) (string, string) {
	if l.A != "" && l.B != "" {
		return l.A, l.B
	}
	r := Target{Pick: l.Pick}.rand()
	lay := c.Layout()
	var srv []string
	for _, s := range slices.Concat(lay.Servers, lay.Joining) {
		srv = append(srv, s.ID)
	}
	wrk := ids(c.Alive(RoleWorker))
	pick := func(ids []string) string { return ids[r.IntN(len(ids))] }
	for {
		switch x := r.IntN(100); {
		case x < 40 && len(wrk) > 0:
			return pick(wrk), pick(srv)
		case x >= 40 && x < 65 && len(srv) > 1:
			i := r.IntN(len(srv))
			j := (i + 1 + r.IntN(len(srv)-1)) % len(srv)
			return srv[i], srv[j]
		case x >= 65 && x < 85:
			return "coordinator", pick(srv)
		case x >= 85 && len(wrk) > 0:
			return "coordinator", pick(wrk)
		}
	}
}

// Partition holds every byte between two nodes for For, then heals: long
// enough, it makes the coordinator declare a live node dead.
type Partition struct {
	Link
	For time.Duration
}

func (f Partition) String() string { return fmt.Sprintf("partition for %v", f.For) }

// A partition between the coordinator and a server that holds the last
// copy of some slot is skipped, as a kill of it is (KillServer): long
// enough, it is that server's death to the coordinator, and it would
// take a second failure within the first's rebuild to make (a kill and
// such a partition in the same instant lost every copy of slots, seeds
// 461321 and 461359 of the drains mix), beyond what k copies keep.
func (f Partition) Apply(ctx context.Context, c *Cluster) {
	a, b := f.choose(c)
	for _, p := range [][2]string{{a, b}, {b, a}} {
		if p[0] == "coordinator" && c.copies.WouldLose(p[1]) {
			c.Note("skip %v: coordinator | %s, which holds the last copy of some slot", f, p[1])
			return
		}
	}
	c.Note("FAULT partition %s | %s for %v", a, b, f.For)
	c.net.Partition(a, b)
	sleep(ctx, f.For)
	c.net.Heal(a, b)
	c.Note("healed %s | %s", a, b)
}

// Delay adds Extra to a link's one-way delay for For: a latency spike.
type Delay struct {
	Link
	Extra, For time.Duration
}

func (f Delay) String() string { return fmt.Sprintf("latency spike +%v for %v", f.Extra, f.For) }

func (f Delay) Apply(ctx context.Context, c *Cluster) {
	a, b := f.choose(c)
	c.Note("FAULT delay %s - %s +%v for %v", a, b, f.Extra, f.For)
	c.net.Delay(a, b, f.Extra)
	sleep(ctx, f.For)
	c.net.Delay(a, b, 0)
	c.Note("delay over %s - %s", a, b)
}

// Drop resets one live connection, drawn from Pick.
type Drop struct{ Pick uint64 }

func (f Drop) String() string { return "drop connection" }

func (f Drop) Apply(_ context.Context, c *Cluster) {
	if a, b, ok := c.net.Drop(Target{Pick: f.Pick}.rand()); ok {
		c.Note("FAULT reset a connection %s - %s", a, b)
	}
}

// SlowWorker makes a worker compute Factor times slower for For: a
// straggler.
type SlowWorker struct {
	Target
	Factor float64
	For    time.Duration
}

func (f SlowWorker) String() string { return fmt.Sprintf("slow worker ×%g for %v", f.Factor, f.For) }

func (f SlowWorker) Apply(ctx context.Context, c *Cluster) {
	id := f.choose(ids(c.Alive(RoleWorker)))
	if id == "" {
		return
	}
	c.Note("FAULT slow %s ×%g for %v", id, f.Factor, f.For)
	c.SlowWorker(id, f.Factor)
	sleep(ctx, f.For)
	c.SlowWorker(id, 1)
	c.Note("%s back to speed", id)
}

// Revoke takes every machine of Class at once, as a spot market does.
// With a Notice, each node first gets an eviction notice and drains;
// whatever of the class is still there when the notice runs out is
// killed. Killed or drained workers are replaced after Replace (never if
// negative) by workers of the configured class. Servers are not replaced:
// with every copy of a slot on the class, the slot is lost (Copies
// counts it). With ServersOnly, only the class's servers are taken.
type Revoke struct {
	Class       string
	Notice      time.Duration
	Replace     time.Duration
	ServersOnly bool
}

func (f Revoke) String() string {
	return fmt.Sprintf("revoke class %q with %v notice", f.Class, f.Notice)
}

func (f Revoke) Apply(ctx context.Context, c *Cluster) {
	var hit []*Node
	for _, n := range slices.Concat(c.Alive(RoleServer), c.Alive(RoleWorker)) {
		if n.Class == f.Class && (n.Role == RoleServer || !f.ServersOnly) {
			hit = append(hit, n)
		}
	}
	c.Note("FAULT revoke class %q (%d nodes) with %v notice", f.Class, len(hit), f.Notice)
	if f.Notice > 0 {
		for _, n := range hit {
			c.Drain(n.ID, f.Notice)
		}
		if !sleep(ctx, f.Notice) {
			return
		}
		c.checkNotice(f, hit)
	}
	// Every death is in Copies before any crash: they are one instant.
	for _, n := range hit {
		if n.Role == RoleServer {
			c.copies.Died(n.ID)
		}
	}
	for _, n := range hit {
		c.mu.Lock()
		done := n.done
		c.mu.Unlock()
		if done {
			continue
		}
		if n.Role == RoleServer {
			c.KillServer(n.ID)
		} else {
			c.KillWorker(n.ID, -1)
		}
	}
	for _, n := range hit {
		if n.Role == RoleWorker {
			c.Replace(f.Replace)
		}
	}
}
