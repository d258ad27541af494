package server

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
)

// The server's core, driven by scenario files (testdata/*.txt, in the
// datadriven format of etcd's raft; `go test -run Scenario -rewrite`
// regenerates the expected outputs, to review with git diff). Each file
// drives one pure type with commands, and records what it answers.

// TestConsistencyScenarios drives the clocks and BSP deferral
// (consistency): testdata/consistency.txt.
func TestConsistencyScenarios(t *testing.T) {
	var c consistency[string, string]
	var out *flush[string] // the flush a driver is applying
	datadriven.RunTest(t, "testdata/consistency.txt", func(t *testing.T, d *datadriven.TestData) string {
		var b strings.Builder
		switch d.Cmd {
		case "workers":
			var n int
			d.ScanArgs(t, "n", &n)
			if d.HasArg("fresh") { // a server's first layout
				c, out = consistency[string, string]{}, nil
			}
			c.resize(n)
		case "clock":
			var w int
			var v string
			d.ScanArgs(t, "w", &w)
			d.ScanArgs(t, "v", &v)
			counted, starts, f, ok := c.advance(w, parseClock(t, v))
			if !ok {
				return "refused: no such worker\n"
			}
			fmt.Fprintf(&b, "counted at %s\n", clockName(counted))
			if starts != counted {
				fmt.Fprintf(&b, "starts at %s\n", clockName(starts))
			}
			if f != nil {
				out = f
				fmt.Fprintf(&b, "flush to %s: apply %v\n", clockName(f.upTo), f.due)
			}
		case "off-ring":
			c.offRing()
		case "flushed":
			if out == nil {
				return "no flush out\n"
			}
			ready, next := c.flushed(out)
			out = next
			fmt.Fprintf(&b, "released %v\n", ready)
			if next != nil {
				fmt.Fprintf(&b, "flush to %s: apply %v\n", clockName(next.upTo), next.due)
			}
		case "push":
			var clock int64
			var w uint32
			var name string
			d.ScanArgs(t, "clock", &clock)
			d.ScanArgs(t, "w", &w)
			d.ScanArgs(t, "name", &name)
			if c.deferPush(clock, w, name) {
				return "deferred\n"
			}
			return "apply now\n"
		case "read":
			var need int64
			var name string
			d.ScanArgs(t, "need", &need)
			d.ScanArgs(t, "name", &name)
			if c.park(need, name) {
				return "answer now\n"
			}
			return "parked\n"
		default:
			d.Fatalf(t, "unknown command %s", d.Cmd)
		}
		fmt.Fprintf(&b, "clocks %s min %s floor %s", clockList(c.clock), clockName(c.min), clockName(c.floor))
		if c.flushing {
			b.WriteString(" flushing")
		}
		return b.String() + "\n"
	})
}

func parseClock(t *testing.T, v string) int64 {
	switch v {
	case "idle":
		return wire.ClockIdle
	case "finished":
		return wire.ClockFinished
	}
	var n int64
	if _, err := fmt.Sscan(v, &n); err != nil {
		t.Fatalf("clock %q: %v", v, err)
	}
	return n
}

func clockName(v int64) string {
	switch v {
	case wire.ClockIdle:
		return "idle"
	case wire.ClockFinished:
		return "finished"
	}
	return fmt.Sprint(v)
}

func clockList(cs []int64) string {
	var s []string
	for _, c := range cs {
		s = append(s, clockName(c))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// TestDedupScenarios drives the pairs (dedup): testdata/dedup.txt.
func TestDedupScenarios(t *testing.T) {
	var dd dedup
	signals := map[string]chan struct{}{}
	datadriven.RunTest(t, "testdata/dedup.txt", func(t *testing.T, d *datadriven.TestData) string {
		var client, seq, acked uint64
		var table uint32 = 1
		d.MaybeScanArgs(t, "client", &client)
		d.MaybeScanArgs(t, "seq", &seq)
		d.MaybeScanArgs(t, "acked", &acked)
		d.MaybeScanArgs(t, "table", &table)
		var b strings.Builder
		switch d.Cmd {
		case "check":
			var anc []uint64
			d.MaybeScanArgs(t, "ancestors", &anc)
			held, wait := dd.check(client, seq, acked, table, anc)
			fmt.Fprintf(&b, "held %s", scopeString(held))
			if len(wait) > 0 {
				var names []string
				for _, w := range wait {
					names = append(names, signalName(signals, w))
				}
				fmt.Fprintf(&b, ", wait for %v", names)
			}
			b.WriteString("\n")
		case "applied":
			dd.applied(client, seq)
		case "abandon":
			dd.abandon(client, seq)
		case "deferring":
			ch := dd.deferring(client, seq)
			signals[fmt.Sprintf("durable(%d,%d)", client, seq)] = ch
		case "hold":
			ch := dd.hold(client, seq, acked, table, slotsArg(t, d))
			signals[fmt.Sprintf("durable(%d,%d)", client, seq)] = ch
		case "add":
			dd.add(client, seq, acked, table, slotsArg(t, d))
		case "drop":
			dd.drop(table, slotsArg(t, d))
		case "scoped":
			for _, p := range sortPairs(dd.scoped(table, slotsArg(t, d))) {
				fmt.Fprintf(&b, "pair (%d,%d) acked %d slots %v\n", p.Client, p.Seq, p.Acked, p.Slots)
			}
			return b.String()
		default:
			d.Fatalf(t, "unknown command %s", d.Cmd)
		}
		b.WriteString(dumpDedup(&dd, signals))
		return b.String()
	})
}

func scopeString(s scope) string {
	switch {
	case s.all:
		return "all"
	case len(s.slots) > 0:
		return fmt.Sprint(s.slots)
	}
	return "nothing"
}

func signalName(signals map[string]chan struct{}, ch chan struct{}) string {
	for name, c := range signals {
		if c == ch {
			return name
		}
	}
	return "applying"
}

func sortPairs(ps []wire.Pair) []wire.Pair {
	slices.SortFunc(ps, func(a, b wire.Pair) int { return cmpU64(a.Client, b.Client)*2 + cmpU64(a.Seq, b.Seq) })
	return ps
}

func dumpDedup(dd *dedup, signals map[string]chan struct{}) string {
	var lines []string
	for client, c := range dd.clients {
		for seq, s := range c.set {
			line := fmt.Sprintf("  (%d,%d) table %d %s", client, seq, s.table, scopeString(s))
			if s.applying != nil {
				line += " applying"
			}
			if s.durable != nil {
				line += " until " + signalName(signals, s.durable)
			}
			lines = append(lines, line)
		}
		if c.low > 0 {
			lines = append(lines, fmt.Sprintf("  client %d: below %d forgotten", client, c.low))
		}
	}
	sort.Strings(lines)
	if len(lines) == 0 {
		return "holds nothing\n"
	}
	return "holds:\n" + strings.Join(lines, "\n") + "\n"
}

func slotsArg(t *testing.T, d *datadriven.TestData) keyspace.SlotSet {
	var v []uint64
	d.MaybeScanArgs(t, "slots", &v)
	if len(v)%2 != 0 {
		d.Fatalf(t, "slots (lo, hi, ...) of odd length")
	}
	if d.HasArg("all") {
		return keyspace.AllSlots
	}
	return keyspace.SlotSet(v)
}

// chainsWorld holds the layouts, chain changes and peer sync states of a
// chains scenario.
type chainsWorld struct {
	layouts map[string]chains
	changes []chainsChange
	sync    map[string]*peerSync
	table   *tableState
}

// TestChainsScenarios drives chain grouping and copy-first sync (chains,
// chainsChange, peerSync): testdata/chains.txt.
func TestChainsScenarios(t *testing.T) {
	w := &chainsWorld{layouts: map[string]chains{}, sync: map[string]*peerSync{}, table: &tableState{id: 1}}
	datadriven.RunTest(t, "testdata/chains.txt", w.run)
}

func (w *chainsWorld) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "layout":
		return w.layout(t, d)
	case "find":
		return w.find(t, d)
	case "groups":
		var name string
		d.ScanArgs(t, "layout", &name)
		var out []string
		for id, g := range w.layouts[name].groups(w.table, keysArg(t, d)) {
			out = append(out, fmt.Sprintf("%s: %s", id, keysString(g.items[0].keys)))
		}
		sort.Strings(out)
		return strings.Join(out, "\n") + "\n"
	case "change":
		var from, to, me string
		d.ScanArgs(t, "from", &from)
		d.ScanArgs(t, "to", &to)
		d.ScanArgs(t, "me", &me)
		c := chainsChange{old: w.layouts[from], cur: w.layouts[to], gap: d.HasArg("gap")}
		w.changes = append(w.changes, c)
		return fmt.Sprintf("change %d; %s may head fewer slots: %v\n", len(w.changes), me, c.loses(me))
	case "stream":
		// stream name=S me=a peer=b: a's stream to b starts now.
		var name, me, peer string
		d.ScanArgs(t, "name", &name)
		d.ScanArgs(t, "me", &me)
		d.ScanArgs(t, "peer", &peer)
		p := newPeerSync(me, peer, len(w.changes))
		w.sync[name] = &p
		return fmt.Sprintf("in step with everything: %v\n", p.inSync(w.changes))
	case "send":
		var name string
		d.ScanArgs(t, "stream", &name)
		e := entry{items: []item{{t: w.table, keys: keysArg(t, d)}}}
		var out []string
		for _, e := range w.sync[name].copiesFirst(w.changes, []entry{e}) {
			out = append(out, entryString(e))
		}
		return strings.Join(out, "\n") + "\n"
	case "fail":
		var name string
		d.ScanArgs(t, "stream", &name)
		w.sync[name].mustCopy([]entry{{items: []item{{t: w.table, keys: keysArg(t, d)}}}})
		return "ok\n"
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return ""
}

// layout builds a layout's chains: layout name=L epoch=E servers=(a,b,c)
// k=2 [joining=(d)] [leaving=(c)].
func (w *chainsWorld) layout(t *testing.T, d *datadriven.TestData) string {
	var name string
	var epoch uint64
	var ids, joining, leaving []string
	k := 1
	d.ScanArgs(t, "layout", &name)
	d.ScanArgs(t, "epoch", &epoch)
	d.ScanArgs(t, "servers", &ids)
	d.MaybeScanArgs(t, "k", &k)
	d.MaybeScanArgs(t, "joining", &joining)
	d.MaybeScanArgs(t, "leaving", &leaving)
	srv := func(ids []string) []ring.Server {
		var ss []ring.Server
		for _, id := range ids {
			ss = append(ss, ring.Server{ID: id, Addr: id})
		}
		return ss
	}
	l := &layout.Layout{Version: epoch, Epoch: epoch, Replication: k, Servers: srv(ids), Joining: srv(joining), Leaving: leaving}
	rm, err := l.Ring()
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	ch, err := newChains(l, rm)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	w.layouts[name] = ch
	return "ok\n"
}

// find lists the first n slots whose chains in the named layouts are as
// given: find head=a member=b [in=(L1,L2)] [was=L0 washead=c] n=2.
func (w *chainsWorld) find(t *testing.T, d *datadriven.TestData) string {
	var head, member, was, wasHead string
	var in []string
	n := 1
	d.ScanArgs(t, "head", &head)
	d.MaybeScanArgs(t, "member", &member)
	d.ScanArgs(t, "in", &in)
	d.MaybeScanArgs(t, "was", &was)
	d.MaybeScanArgs(t, "washead", &wasHead)
	d.MaybeScanArgs(t, "n", &n)
	var found []string
	for sl := uint64(0); len(found) < n && sl < 1<<16; sl++ {
		ok := true
		for _, name := range in {
			ch := w.layouts[name]
			if member != "" {
				ok = ok && ch.holds(sl, head, member)
			} else {
				ok = ok && ch.ring.Servers[ch.ring.SlotOwner(sl)].ID == head
			}
		}
		if was != "" {
			old := w.layouts[was].ring
			ok = ok && old.Servers[old.SlotOwner(sl)].ID == wasHead
		}
		if ok {
			succ, _ := w.layouts[in[0]].successors(sl, nil, nil)
			var ids []string
			for _, s := range succ {
				ids = append(ids, s.ID)
			}
			found = append(found, fmt.Sprintf("slot %d (keys %d..%d): members %v", sl, keyspace.SlotStart(sl), keyspace.SlotStart(sl+1)-1, ids))
		}
	}
	return strings.Join(found, "\n") + "\n"
}

// keysArg reads keys=(k1,k2,...) as a list, or run=(lo,hi) as a run.
func keysArg(t *testing.T, d *datadriven.TestData) keyspace.Keys {
	var run []uint64
	if d.MaybeScanArgs(t, "run", &run) {
		var k keyspace.Keys
		k.AddRun(run[0], run[1])
		return k
	}
	var keys []uint64
	d.ScanArgs(t, "keys", &keys)
	return keyspace.KeyList(keys)
}

func keysString(k keyspace.Keys) string {
	if k.IsRuns() {
		var s []string
		for _, r := range k.Runs() {
			s = append(s, r.String())
		}
		return "runs " + strings.Join(s, " ")
	}
	return fmt.Sprintf("keys %v", k.List())
}

func entryString(e entry) string {
	switch {
	case e.copy != nil:
		return fmt.Sprintf("copy of slots %v", e.copy.slots)
	case e.deferred != nil:
		return fmt.Sprintf("deferred push (%d,%d) keys %v", e.deferred.Pair.Client, e.deferred.Pair.Seq, e.deferred.Keys)
	}
	var s []string
	for _, it := range e.items {
		s = append(s, keysString(it.keys))
	}
	return "state of " + strings.Join(s, ", ")
}

// queueWorld is a peerQueue scenario: the queue, the slots this server
// no longer heads, and the waiters released so far.
type queueWorld struct {
	q        peerQueue
	table    *tableState
	moved    keyspace.SlotSet
	released []string
}

// TestQueueScenarios drives a replication stream's queue and its
// acknowledgement policy (peerQueue): testdata/queue.txt.
func TestQueueScenarios(t *testing.T) {
	var w *queueWorld
	datadriven.RunTest(t, "testdata/queue.txt", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd == "queue" {
			var policy string
			d.ScanArgs(t, "policy", &policy)
			w = &queueWorld{table: &tableState{id: 1}}
			w.q.policy = map[string]AckPolicy{"chain": AckChain, "bulk": AckBulk}[policy]
			w.q.sync = newPeerSync("a", "b", 0)
			return fmt.Sprintf("policy %v, window %d\n", w.q.policy, w.q.policy.window())
		}
		return w.run(t, d)
	})
}

func (w *queueWorld) waiter(name string) waiter {
	return func(err error) {
		if err != nil {
			name += " (" + err.Error() + ")"
		}
		w.released = append(w.released, name)
	}
}

func (w *queueWorld) run(t *testing.T, d *datadriven.TestData) string {
	var name string
	var round uint64
	d.MaybeScanArgs(t, "name", &name)
	d.MaybeScanArgs(t, "round", &round)
	switch d.Cmd {
	case "push":
		e := entry{items: []item{{t: w.table, keys: keysArg(t, d)}}}
		if d.HasArg("deferred") {
			e = entry{deferred: &wire.Deferred{Keys: keysArg(t, d).List()}}
		}
		w.call(w.q.add(e, w.waiter(name)))
	case "copy":
		w.call(w.q.addBulk(&slotCopy{t: w.table, slots: slotsArg(t, d)}, w.waiter(name)))
	case "move":
		w.moved = slotsArg(t, d)
	case "take", "extend":
		heads := func(e entry) bool {
			for _, it := range e.items {
				for sp := range it.keys.Spans() {
					if w.moved.Contains(sp.Slot) {
						return false
					}
				}
			}
			return true
		}
		p := w.q.take(round, d.Cmd == "take", heads, nil)
		var b strings.Builder
		fmt.Fprintf(&b, "round %d:\n", p.round)
		for _, bt := range p.send {
			for _, e := range bt.entries {
				fmt.Fprintf(&b, "  %s\n", entryString(e))
			}
		}
		for _, f := range p.failed {
			f(errMoved)
		}
		for _, f := range p.acked {
			f(nil) // gate-held pushes whose rounds were dropped
		}
		return b.String() + w.report()
	case "confirm":
		for _, f := range w.q.confirmed(round) {
			f(nil)
		}
	case "unconfirm":
		w.q.unconfirm(round)
	case "cut":
		w.q.cut()
	case "policy":
		// What replicator.setPolicy does at a layout's install.
		var policy string
		d.ScanArgs(t, "to", &policy)
		w.q.policy = map[string]AckPolicy{"chain": AckChain, "bulk": AckBulk}[policy]
	case "leave":
		for _, f := range w.q.leave() {
			f(nil)
		}
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	return w.report()
}

func (w *queueWorld) call(now waiter) {
	if now != nil {
		now(nil)
	}
}

// report says which waiters were released since the last report, and the
// durability watermark.
func (w *queueWorld) report() string {
	var b strings.Builder
	if len(w.released) > 0 {
		fmt.Fprintf(&b, "acknowledged %s\n", strings.Join(w.released, ", "))
		w.released = nil
	}
	durable, queued := w.q.durable()
	held, inflight := len(w.q.held), 0
	for _, bt := range w.q.held {
		if bt.round != 0 {
			inflight++
		}
	}
	fmt.Fprintf(&b, "durable %d of %d; %d pending, %d batches held (%d in flight), %d copies queued\n", durable, queued, len(w.q.pending), held, inflight, len(w.q.bulk))
	return b.String()
}
