package coord

import (
	"maps"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// Partition state versions (docs/design/partstate.md): a report with state
// makes a new version, whose blob the driver writes to its StateStore
// before the report is stepped; the version is named by the piece (and,
// once the partition is complete, by the partition) until a newer one
// replaces it, and is dropped once nothing names it.

// AllocStates checks that u's rank holds the piece it reports on and
// gives out the versions under which the driver stores u's state (head)
// and its tail's (tail): 0 for a blob u does not carry, and for a report
// that will change nothing. Versions only grow within a term; a successor
// may give a number out again, but only one that no saved state names,
// and a store overwrites.
func (m *Machine) AllocStates(u api.Update) (head, tail uint64, err error) {
	_, i, err := m.reportedPiece(u)
	if err != nil || i < 0 {
		return 0, 0, err
	}
	if u.HasState {
		m.st.NextStateVer++
		head = m.st.NextStateVer
	}
	if u.Cut != nil && u.Cut.HasState {
		m.st.NextStateVer++
		tail = m.st.NextStateVer
	}
	return head, tail, nil
}

// StateCurrent reports whether version ver of partition p's state is
// named by a piece or by the partition: only those are served, since a
// worker asking for another was declared dead while another trained the
// partition on.
func (m *Machine) StateCurrent(p int, ver uint64) bool { return ver != 0 && m.referenced(p, ver) }

// StateVersions returns every version named, by partition: what a new
// leader keeps when it sweeps its store.
func (m *Machine) StateVersions() map[int][]uint64 {
	out := maps.Clone(m.st.PartStates)
	if mp := m.st.Checkpoint.MidPass; mp != nil {
		for p, vs := range mp.States {
			for _, v := range vs {
				if !slices.Contains(out[p], v) {
					out[p] = append(slices.Clone(out[p]), v)
				}
			}
		}
	}
	for _, w := range m.st.Passes {
		for p, pcs := range w.Parts {
			for _, pc := range pcs {
				for _, v := range pc.States {
					if !slices.Contains(out[p], v) {
						out[p] = append(slices.Clone(out[p]), v)
					}
				}
			}
		}
	}
	return out
}

// referenced reports whether a piece or partition p names version v, or
// the checkpoint in progress does (one begun inside a pass names the
// states as it began, which its commit writes).
func (m *Machine) referenced(p int, v uint64) bool {
	if slices.Contains(m.st.PartStates[p], v) {
		return true
	}
	if mp := m.st.Checkpoint.MidPass; mp != nil && slices.Contains(mp.States[p], v) {
		return true
	}
	for _, w := range m.st.Passes {
		if p < len(w.Parts) && slices.ContainsFunc(w.Parts[p], func(pc Piece) bool { return slices.Contains(pc.States, v) }) {
			return true
		}
	}
	return false
}

// unref drops the versions of partition p that nothing names any more.
func (m *Machine) unref(p int, vers ...uint64) {
	for _, v := range vers {
		ref := StateRef{Partition: p, Version: v}
		if v != 0 && !m.referenced(p, v) && !slices.Contains(m.out.Drops, ref) {
			m.out.Drops = append(m.out.Drops, ref)
		}
	}
}
