package coord

import (
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
