package coord

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// A save costs what changed (docs/design/control.md): the state blob
// leaves out the passes' pieces and the partitions' states, which are
// saved as one record per partition, written when the partition changes.
// A record holds the partition's states and its pieces in the passes in
// progress, but not a pass's fresh piece (the whole partition, free,
// from the partition's states), so that beginning a pass writes no
// record; a reader takes the passes the blob lists (State.InProgress)
// and ignores a record's others, so that retiring a pass writes none
// either.

// MaxSaveParts and MaxSavePartBytes bound the records a save carries
// besides the blob (at most 1 MiB, meta.MaxSnapshotBytes), so that the
// whole goes in one etcd transaction under etcd's default limits (128
// operations, 1.5 MiB a request). A save with more rewrites every record
// under a new generation instead, which the store writes in several
// transactions, the blob last.
const (
	MaxSaveParts     = 100
	MaxSavePartBytes = 256 << 10
)

// Save is a Ready's state to save.
type Save struct {
	// State is the blob: the State without its pieces and partition
	// states.
	State []byte
	// Gen is the generation of partition records State names.
	Gen uint64
	// Parts are the records of generation Gen that changed, by
	// partition; a nil one is deleted (the partition has nothing to
	// record).
	Parts map[int][]byte
	// Rewrite: Parts holds every record of generation Gen, which is new;
	// the store deletes every other generation's, and writes State last.
	Rewrite bool
}

// Saved is what a store holds: the last blob saved, and the records of
// the generation it names.
type Saved struct {
	State []byte
	Gen   uint64
	Parts map[int][]byte
}

// Apply makes s what a store holds once sv is saved on top of it: the
// reference for stores (meta's keeps the same in etcd).
func (s *Saved) Apply(sv *Save) {
	s.State = sv.State
	if sv.Rewrite || s.Parts == nil {
		s.Gen, s.Parts = sv.Gen, map[int][]byte{}
	}
	for p, b := range sv.Parts {
		if b == nil {
			delete(s.Parts, p)
		} else {
			s.Parts[p] = b
		}
	}
}

// partRecord is a partition's record: its states, and its pieces by
// pass where they are not the pass's fresh piece.
type partRecord struct {
	States []uint64        `json:"states,omitempty"`
	Pieces map[int][]Piece `json:"pieces,omitempty"`
}

// changed notes that partition p's pieces in w, or its states, changed:
// its record goes in the next save, and w's count of the partitions left
// follows. Every change to a partition's pieces or states must be
// followed by it (the scenarios' harness checks, at every save, that the
// store restores to the machine's state).
func (m *Machine) changed(w *Pass, p int) {
	m.partsDirty[p] = struct{}{}
	if w != nil {
		w.recount(p)
	}
}

// rewriteParts makes the next save rewrite every partition's record:
// the passes or the partitions' states were replaced whole.
func (m *Machine) rewriteParts() {
	m.rewrite = true
	m.dirty = true
}

// save marshals what the next save writes, and forgets what was dirty.
func (m *Machine) save() *Save {
	sv := &Save{Parts: map[int][]byte{}}
	if !m.rewrite {
		n := 0
		for p := range m.partsDirty {
			b := m.record(p)
			sv.Parts[p] = b
			n += len(b)
		}
		m.rewrite = len(sv.Parts) > MaxSaveParts || n > MaxSavePartBytes
	}
	if m.rewrite {
		m.st.PartsGen++
		clear(sv.Parts)
		for p := range m.st.Layout.Partitions {
			if b := m.record(p); b != nil {
				sv.Parts[p] = b
			}
		}
		sv.Rewrite = true
	}
	sv.Gen = m.st.PartsGen
	st := m.st
	st.Passes, st.PartStates, st.InProgress = nil, nil, m.passNumbers()
	blob, err := json.Marshal(st)
	if err != nil {
		panic(fmt.Sprintf("coord: marshalling the state: %v", err)) // plain data: cannot fail
	}
	sv.State = blob
	clear(m.partsDirty)
	m.rewrite = false
	return sv
}

// record marshals partition p's record; nil if it has nothing to hold.
func (m *Machine) record(p int) []byte {
	r := partRecord{States: m.st.PartStates[p]}
	for e, w := range m.st.Passes {
		if pcs := w.Parts[p]; !fresh(pcs, r.States) {
			if r.Pieces == nil {
				r.Pieces = map[int][]Piece{}
			}
			r.Pieces[e] = pcs
		}
	}
	if len(r.States) == 0 && r.Pieces == nil {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("coord: marshalling partition %d: %v", p, err)) // plain data: cannot fail
	}
	return b
}

// freshPiece is the piece a pass begins partition p with: all of it,
// free, from the partition's states.
func freshPiece(states []uint64) Piece {
	return Piece{Start: 0, End: api.ToEnd, Rank: -1, States: slices.Clone(states)}
}

// fresh reports whether pcs is a pass's fresh piece of a partition with
// states.
func fresh(pcs []Piece, states []uint64) bool {
	if len(pcs) != 1 {
		return false
	}
	pc := pcs[0]
	return pc.Start == 0 && pc.End == api.ToEnd && pc.Offset == 0 && pc.Rank == -1 && pc.Grant == 0 && !pc.Done &&
		pc.Cut == nil && slices.Equal(pc.States, states)
}

// decodeSaved reads what a store holds: the blob, and the records of
// its generation. A blob saved before records existed holds the pieces
// and states itself; it is read so, and the first save rewrites it as
// records.
func decodeSaved(sv Saved) (State, bool, error) {
	st, err := decodeState(sv.State)
	if err != nil {
		return State{}, false, err
	}
	if len(st.Passes) > 0 || len(st.PartStates) > 0 {
		return st, true, checkPasses(st)
	}
	if sv.Gen != st.PartsGen {
		return State{}, false, fmt.Errorf("coord: saved state: its partitions' records are of generation %d, and it names %d", sv.Gen, st.PartsGen)
	}
	recs := make([]partRecord, st.Layout.Partitions)
	for _, p := range slices.Sorted(maps.Keys(sv.Parts)) {
		if p < 0 || p >= len(recs) {
			return State{}, false, fmt.Errorf("coord: saved state: a record of partition %d of %d", p, len(recs))
		}
		if err := json.Unmarshal(sv.Parts[p], &recs[p]); err != nil {
			return State{}, false, fmt.Errorf("coord: saved state: partition %d: %w", p, err)
		}
		if len(recs[p].States) > 0 {
			st.PartStates[p] = recs[p].States
		}
	}
	for _, e := range st.InProgress {
		w := &Pass{Parts: make([][]Piece, len(recs))}
		for p, r := range recs {
			if pcs, ok := r.Pieces[e]; ok {
				w.Parts[p] = pcs
			} else {
				w.Parts[p] = []Piece{freshPiece(r.States)}
			}
		}
		st.Passes[e] = w
	}
	st.InProgress = nil
	return st, false, checkPasses(st)
}

// checkPasses refuses a saved pass whose pieces do not cover every
// partition, and counts what each pass has left.
func checkPasses(st State) error {
	for e, w := range st.Passes {
		if w == nil || len(w.Parts) != st.Layout.Partitions {
			return fmt.Errorf("coord: saved state: pass %d has no pieces for its %d partitions", e, st.Layout.Partitions)
		}
		for p, pcs := range w.Parts {
			if len(pcs) == 0 {
				return fmt.Errorf("coord: saved state: pass %d has no piece of partition %d", e, p)
			}
		}
		w.count()
	}
	return nil
}
