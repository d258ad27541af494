package coord

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
)

// checkLayout fails the test if a published layout has servers but an
// empty final ring: every server refuses it ("ring: no servers") and its
// process ends (docs/design/sim.md, tier seed 610). A ring emptied by the
// last server leaving after the job's end is allowed.
func (h *harness) checkLayout(l *layout.Layout) {
	h.t.Helper()
	if len(l.Servers) == 0 {
		return
	}
	if _, err := l.Final(); err != nil {
		h.t.Errorf("layout v%d published with servers %d, leaving %v: its final ring: %v", l.Version, len(l.Servers), l.Leaving, err)
	}
}

// check fails the test if the machine's pieces break an invariant: in
// every pass, a partition's pieces tile its rows from 0 to its end in
// order; offsets lie within their pieces; a done piece is held by nobody;
// a cut is pending only on a held piece; a rank holds at most one piece a
// pass; and every state version named is stored (never dropped).
func (h *harness) check() {
	h.t.Helper()
	for _, e := range h.m.passNumbers() {
		h.checkIndex(e, h.m.st.Passes[e])
		held := map[int]bool{}
		for p, pcs := range h.m.st.Passes[e].Parts {
			for i, pc := range pcs {
				where := func(why string) {
					h.t.Helper()
					h.t.Fatalf("pass %d partition %d piece %d %s: %s", e, p, i, pc.String(), why)
				}
				switch {
				case i == 0 && pc.Start != 0:
					where("the first piece does not start at row 0")
				case i > 0 && pcs[i-1].End != pc.Start:
					where("a gap or an overlap with the piece before")
				case (i == len(pcs)-1) != (pc.End == api.ToEnd):
					where("only the last piece runs to the end")
				case pc.Offset < pc.Start || pc.End != api.ToEnd && pc.Offset > pc.End:
					where("offset outside the piece")
				case pc.Done && pc.Rank >= 0:
					where("done and held")
				case pc.Cut != nil && (pc.Done || pc.Rank < 0):
					where("a cut pending on a piece nobody holds")
				case !pc.Done && pc.Rank >= 0 && held[pc.Rank]:
					where("its rank holds another piece of the pass")
				}
				if !pc.Done && pc.Rank >= 0 {
					held[pc.Rank] = true
				}
				h.checkStored(p, pc.States)
			}
		}
	}
	for p, vs := range h.m.st.PartStates {
		h.checkStored(p, vs)
	}
}

func (h *harness) checkStored(p int, vers []uint64) {
	h.t.Helper()
	for _, v := range vers {
		if _, ok := h.blobs[StateRef{p, v}]; !ok {
			h.t.Fatalf("partition %d's state version %d is named but not stored (dropped?)", p, v)
		}
	}
}

// checkSave fails the test if the store, once sv is saved on what it
// holds, does not restore to the machine's state as sv took it: a change
// to a partition whose record was not marked dirty (parts.go).
func (h *harness) checkSave(sv *Save) {
	h.t.Helper()
	img := Saved{State: h.saved.State, Gen: h.saved.Gen, Parts: maps.Clone(h.saved.Parts)}
	img.Apply(sv)
	st, _, err := decodeSaved(img)
	if err != nil {
		h.t.Fatalf("the store after a save: %v", err)
	}
	got, err := json.Marshal(st)
	if err != nil {
		h.t.Fatal(err)
	}
	want, err := json.Marshal(h.m.st)
	if err != nil {
		h.t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		h.t.Fatalf("the store after a save restores to\n%s\nand the machine's state is\n%s", got, want)
	}
}

// checkIndex fails the test if pass e's index of its pieces (Pass.count)
// is not what indexing them afresh gives: a change it did not follow.
func (h *harness) checkIndex(e int, w *Pass) {
	h.t.Helper()
	fresh := newPass(w.Parts)
	if w.left() != fresh.left() || !slices.Equal(w.done, fresh.done) || !slices.Equal(w.free, fresh.free) {
		h.t.Fatalf("pass %d's index: %d left, complete %v, free %v; its pieces: %d left, complete %v, free %v",
			e, w.left(), w.done, w.free, fresh.left(), fresh.done, fresh.free)
	}
	for p, free := range w.free {
		if free && (p < w.firstFree || len(w.byClass) > 0 && p < w.byClass[p%len(w.byClass)]) {
			h.t.Fatalf("pass %d: partition %d has a free piece below the index's bounds %d, %v", e, p, w.firstFree, w.byClass)
		}
	}
	for rank, p := range fresh.holder {
		if got, _ := h.m.heldBy(w, rank); got != p {
			h.t.Fatalf("pass %d: rank %d holds a piece of partition %d, and the index says %d", e, rank, p, got)
		}
	}
}
