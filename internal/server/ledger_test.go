package server

import (
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/keyspace"
)

func slots(s ...uint64) keyspace.SlotSet {
	var out keyspace.SlotSet
	for _, sl := range s {
		out.Add(sl)
	}
	return out
}

func seqs(ps []LostPush) []uint64 {
	var out []uint64
	for _, p := range ps {
		out = append(out, p.Seq)
	}
	return out
}

// TestLedgerCountsWhatIsNotDurable walks the ledger through a BackupPS's
// life: pushes allowed, rounds and copies that make some durable here,
// the fallback that freezes the rest, and the re-sends of clients that
// never heard the acknowledgement (docs/design/tiers.md, I3).
func TestLedgerCountsWhatIsNotDurable(t *testing.T) {
	var l ledger
	pair := func(client, seq uint64, table uint32, sl keyspace.SlotSet) wire.Pair {
		return wire.Pair{Client: client, Seq: seq, Table: table, Slots: sl}
	}
	l.allow(pair(1, 1, 0, slots(1, 2)), scope{})
	l.allow(pair(1, 2, 0, slots(2)), scope{})
	l.allow(pair(1, 3, 0, slots(3)), scope{})
	l.allow(pair(2, 1, 0, slots(1, 5)), scope{})
	w4 := pair(2, 2, 1, slots(7))
	w4.Acked = 5 // worker 4's (ledgerPair)
	l.allow(w4, scope{})
	// A round that carried the pair overtook the ledger's message: its
	// slots are durable already.
	l.allow(pair(2, 3, 0, slots(8)), scope{slots: slots(8)})
	l.allow(pair(2, 4, 0, slots(8)), scope{all: true})
	if len(l.open) != 5 {
		t.Fatalf("open %v, want 5 entries", l.open)
	}

	// A round makes (1,1) durable in slot 1 only, and (1,2) whole.
	l.installed(pair(1, 1, 0, slots(1)))
	l.installed(pair(1, 2, 0, slots(2)))
	// A pair of another table does not clear it.
	l.installed(pair(2, 2, 0, slots(7)))
	if _, ok := l.open[pairKey{1, 2}]; ok {
		t.Error("(1,2) still open after its round was installed")
	}
	if e := l.open[pairKey{1, 1}]; !slices.Equal(e.slots, slots(2)) {
		t.Errorf("(1,1) open in %v, want slot 2", e.slots)
	}
	// A full copy of slot 5 of table 0 carries (2,1) there.
	l.replaced(0, slots(5))
	if e := l.open[pairKey{2, 1}]; !slices.Equal(e.slots, slots(1)) {
		t.Errorf("(2,1) open in %v, want slot 1", e.slots)
	}

	// The fallback: this server heads slots 1, 2 and 7; (1,3) in slot 3 is
	// another head's to count.
	heads := func(sl uint64) bool { return sl == 1 || sl == 2 || sl == 7 }
	if n := l.freeze(9, heads); n != 3 {
		t.Fatalf("freeze: %d at risk, want 3 ((1,1), (2,1), (2,2))", n)
	}
	// New ledger entries after the fallback (a later stage 2) are not
	// the fallback's.
	l.allow(pair(3, 1, 0, slots(1)), scope{})
	// Client 2 re-sends (2,1) as a part whose ancestor it is: it never
	// heard the acknowledgement. A re-send of a push not in the ledger
	// changes nothing.
	l.resent(2, 10, []uint64{1})
	l.resent(1, 7, nil)
	r := l.report()
	if r.Epoch != 9 {
		t.Errorf("epoch %d, want 9", r.Epoch)
	}
	if got := seqs(r.Allowed); !slices.Equal(got, []uint64{1, 1, 2}) {
		t.Errorf("allowed seqs %v, want (1,1) (2,1) (2,2)", r.Allowed)
	}
	if len(r.Lost) != 2 || r.Lost[0] != (LostPush{1, 1, 0, -1}) || r.Lost[1] != (LostPush{2, 2, 1, 4}) {
		t.Errorf("lost %v, want (1,1) of table 0 and (2,2) of table 1 by worker 4", r.Lost)
	}
	if l.frozen != nil {
		t.Error("the report did not forget the frozen ledger")
	}
	if _, ok := l.open[pairKey{3, 1}]; !ok {
		t.Error("the report forgot the open ledger of a later stage")
	}
}

// TestLedgerFallbackWithinGrace: a second fallback before the first's
// count was reported (a return to stage 2 and a revocation again within
// the grace) reports both.
func TestLedgerFallbackWithinGrace(t *testing.T) {
	var l ledger
	all := func(uint64) bool { return true }
	l.allow(wire.Pair{Client: 1, Seq: 1, Slots: slots(1)}, scope{})
	l.freeze(5, all)
	l.allow(wire.Pair{Client: 1, Seq: 9, Slots: slots(1)}, scope{})
	if n := l.freeze(8, all); n != 1 {
		t.Fatalf("second freeze: %d at risk, want 1", n)
	}
	r := l.report()
	if r.Epoch != 8 || !slices.Equal(seqs(r.Lost), []uint64{1, 9}) || !slices.Equal(seqs(r.Allowed), []uint64{1, 9}) {
		t.Errorf("report %+v, want epoch 8 with (1,1) and (1,9) lost and at risk", r)
	}
}

// TestLedgerSwitchEndWithinGrace: the end of a switch to stage 1 that
// looks like a fallback (a "maybe" freeze with nothing at risk) within the
// grace of a fallback keeps the fallback's epoch, whose count is the one
// scheduled: before, the count was skipped and the loss never reported
// (simulation, TERRACE_SIM_MIX=tiers seed 232).
func TestLedgerSwitchEndWithinGrace(t *testing.T) {
	var l ledger
	all := func(uint64) bool { return true }
	l.allow(wire.Pair{Client: 1, Seq: 1, Slots: slots(1)}, scope{})
	if n := l.freeze(45, all); n != 1 {
		t.Fatalf("fallback: %d at risk, want 1", n)
	}
	if n := l.freeze(312, all); n != 0 {
		t.Fatalf("switch end: %d at risk, want 0", n)
	}
	r := l.report()
	if r.Epoch != 45 || !slices.Equal(seqs(r.Lost), []uint64{1}) || !slices.Equal(seqs(r.Allowed), []uint64{1}) {
		t.Errorf("report %+v, want epoch 45 with (1,1) lost and at risk", r)
	}
}

// TestLedgerKeepsTheWorker: a BSP push's pair reaches the ledger twice,
// naming its worker before it is acknowledged and no worker when its head
// applies it at the end of its clock; the loss is still the worker's.
func TestLedgerKeepsTheWorker(t *testing.T) {
	var l ledger
	l.allow(wire.Pair{Client: 1, Seq: 1, Acked: 3, Slots: slots(1)}, scope{})
	l.allow(wire.Pair{Client: 1, Seq: 1, Slots: slots(1, 2)}, scope{})
	l.freeze(5, func(uint64) bool { return true })
	r := l.report()
	if len(r.Lost) != 1 || r.Lost[0].Worker != 2 {
		t.Errorf("lost %v, want (1,1) of worker 2", r.Lost)
	}
}

// TestLedgerAncestorsHold: a part its client re-sent after a failure
// (seq 20, re-sending 19) is durable on this BackupPS wherever it holds
// the effect of the push it re-sends, whether that state arrived before
// the part's pair (held) or after it (installed): the head that applied
// 19 streamed it before it failed 19 back, and the head of 20 skipped
// what it held of 19. Before, 20 stayed in the ledger and a fallback
// counted it lost though its effect was here (simulation,
// TERRACE_SIM_MIX=tiers seed 1377 with the 2 -> 1 flush).
func TestLedgerAncestorsHold(t *testing.T) {
	var l ledger
	l.allow(wire.Pair{Client: 1, Seq: 20, Slots: slots(29, 30, 31)}, scope{slots: slots(29)}, 19)
	if e := l.open[pairKey{1, 20}]; !slices.Equal(e.slots, slots(30, 31)) {
		t.Fatalf("(1,20) open in %v, want slots 30 and 31 (29 held by its ancestor)", e.slots)
	}
	l.installed(wire.Pair{Client: 1, Seq: 19, Slots: slots(30)})
	if e := l.open[pairKey{1, 20}]; !slices.Equal(e.slots, slots(31)) {
		t.Fatalf("(1,20) open in %v, want slot 31 (30 installed by its ancestor)", e.slots)
	}
	l.installed(wire.Pair{Client: 1, Seq: 19, Slots: slots(31)})
	if len(l.open) != 0 || len(l.byAncestor) != 0 {
		t.Fatalf("open %v, ancestors %v: want both empty", l.open, l.byAncestor)
	}
}

// TestLedgerAncestorNeverAcknowledged: a push its ActivePS failed back
// (19) stays in the ledger as allowed when the retraction dies with that
// ActivePS; its client then re-sends it as a part (20, ancestor 19), and a
// fallback counted 19 lost, though it was never acknowledged and its part
// is in the model: an over-count (simulation, TERRACE_SIM_MIX=tiers seed
// 490520: 18 pushes of a worker counted lost, 17 missing). The part's pair
// tells the ledger that the client took 19 as failed.
func TestLedgerAncestorNeverAcknowledged(t *testing.T) {
	var l ledger
	l.allow(wire.Pair{Client: 1, Seq: 19, Acked: 4, Slots: slots(1)}, scope{})
	l.allow(wire.Pair{Client: 1, Seq: 20, Acked: 4, Slots: slots(1)}, scope{}, 19)
	l.installed(wire.Pair{Client: 1, Seq: 20, Slots: slots(1)})
	l.freeze(5, func(uint64) bool { return true })
	if r := l.report(); len(r.Lost) != 0 || len(r.Allowed) != 0 {
		t.Errorf("report %+v, want nothing lost or at risk: 19 was failed back, 20 is durable", r)
	}
}
