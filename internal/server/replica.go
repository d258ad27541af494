package server

import (
	"errors"
	"fmt"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// maxReplaced bounds the slots one replication round replaces.
const maxReplaced = 1 << 22

// maxStaged bounds the messages of one replication round a receiver holds
// before the round's last (4 MiB of state each).
const maxStaged = 1024

type staged struct {
	epoch uint64
	m     wire.Replicate
}

// handleReplicate installs state that a head sent. The messages of a round
// marked More are kept until its last, and then all are installed at once.
func (s *Server) handleReplicate(c *conn, h wire.Header, p []byte) (wire.Code, error) {
	round, complete, code, err := s.stage(c, h, p)
	if err != nil || !complete {
		return code, err
	}
	// A head that installed a layout first (a new table's, or a new
	// epoch's) may send under it before this server has it: wait, as a
	// data request does. Refused at once for a table not known yet, a
	// new table's first replication warned "replication failed;
	// retrying" in 1 run of 4 of a 5-row file. A round of an older epoch
	// (an earlier job's tables, dropped since) waits for nothing.
	s.catchUp(func() bool {
		return s.ring != nil && (s.ring.Epoch > h.Epoch || s.ring.Epoch == h.Epoch && tablesKnown(round, s.tables))
	})
	// Check and import under the layout lock: a new layout (which may make
	// this server the head of these slots) cannot be installed in between,
	// so a deposed head's late state never overwrites newer pushes.
	s.replicaMu.Lock()
	defer s.replicaMu.Unlock()
	if c.gen != s.replicaGen[c.hello.Node] {
		return wire.CodeStaleEpoch, fmt.Errorf("replication on a superseded connection from %s", c.hello.Node)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	rm := s.ring
	if rm == nil || h.Epoch != rm.Epoch {
		return wire.CodeStaleEpoch, fmt.Errorf("replication at epoch %d, server is at %d", h.Epoch, s.epochLocked())
	}
	replaced, code, err := s.checkRound(round, rm, c.hello.Node)
	if err != nil {
		return code, err
	}
	s.importRound(round, replaced > 0)
	s.stats.replicated.Add(int64(len(p)))
	s.replyOK(c, h.ReqID, rm.Epoch)
	return 0, nil
}

// tablesKnown reports whether every table round names is in tables.
func tablesKnown(round []wire.Replicate, tables map[uint32]*tableState) bool {
	for _, m := range round {
		for _, r := range m.Replace {
			if tables[r.Table] == nil {
				return false
			}
		}
		for _, d := range m.Deferred {
			if tables[d.Pair.Table] == nil {
				return false
			}
		}
		for _, st := range m.States {
			if tables[st.Table] == nil {
				return false
			}
		}
	}
	return true
}

// stage returns the round that message p completes, or complete false
// (and a confirmation sent) for a message marked More, which is kept until
// its round's last.
func (s *Server) stage(c *conn, h wire.Header, p []byte) (round []wire.Replicate, complete bool, code wire.Code, err error) {
	m, err := wire.ParseReplicate(p)
	if err != nil {
		c.staged = nil
		return nil, false, wire.CodeBadRequest, err
	}
	if !m.More && len(c.staged) == 0 {
		return []wire.Replicate{m}, true, 0, nil
	}
	if len(c.staged) >= maxStaged {
		c.staged = nil
		return nil, false, wire.CodeBadRequest, fmt.Errorf("replication round of more than %d messages", maxStaged)
	}
	// The payload buffer is reused for the next frame: keep a copy.
	own := make([]uint64, (len(p)+7)/8)
	copy(wire.U64Bytes(own), p)
	if m, err = wire.ParseReplicate(wire.U64Bytes(own)[:len(p)]); err != nil {
		c.staged = nil
		return nil, false, wire.CodeBadRequest, err
	}
	c.staged = append(c.staged, staged{epoch: h.Epoch, m: m})
	if m.More {
		s.replyOK(c, h.ReqID, s.Epoch())
		return nil, false, 0, nil
	}
	for _, st := range c.staged {
		if st.epoch != h.Epoch {
			c.staged = nil
			return nil, false, wire.CodeStaleEpoch, fmt.Errorf("replication round spans epochs %d and %d", st.epoch, h.Epoch)
		}
		round = append(round, st.m)
	}
	c.staged = nil
	return round, true, 0, nil
}

// checkRound checks that sender heads, under rm, every slot that round
// replaces or carries state or deferred pushes of, and that the round's
// tables and sizes are right. It returns how many slots the round
// replaces. The caller holds mu.
func (s *Server) checkRound(round []wire.Replicate, rm *ring.Map, node string) (replaced int, code wire.Code, err error) {
	sender := rm.Index(node)
	for _, m := range round {
		for _, r := range m.Replace {
			if s.tables[r.Table] == nil {
				return 0, wire.CodeUnknownTable, fmt.Errorf("replaced slots of table %d", r.Table)
			}
			for i := 0; i < len(r.Slots); i += 2 {
				if replaced += int(r.Slots[i+1] - r.Slots[i]); replaced > maxReplaced {
					return 0, wire.CodeBadRequest, fmt.Errorf("replication round replaces more than %d slots", maxReplaced)
				}
				for sl := r.Slots[i]; sl < r.Slots[i+1]; sl++ {
					if h := rm.SlotOwner(sl); h != sender {
						return 0, wire.CodeNotOwner, fmt.Errorf("replication from %s replaces slot %d, headed by %s", node, sl, rm.Servers[h].ID)
					}
				}
			}
		}
		for _, d := range m.Deferred {
			t := s.tables[d.Pair.Table]
			if t == nil || len(d.Vals) != len(d.Keys)*t.spec.Width {
				return 0, wire.CodeBadRequest, fmt.Errorf("deferred push for table %d: %d keys, %d values", d.Pair.Table, len(d.Keys), len(d.Vals))
			}
			if err := checkHead(rm, sender, wire.State{Keys: d.Keys}); err != nil {
				return 0, wire.CodeNotOwner, fmt.Errorf("deferred push from %s: %w", node, err)
			}
		}
		for _, st := range m.States {
			t := s.tables[st.Table]
			if t == nil || int(st.Stride) != t.store.Stride() {
				return 0, wire.CodeUnknownTable, fmt.Errorf("replicated state for table %d of stride %d", st.Table, st.Stride)
			}
			if err := checkHead(rm, sender, st); err != nil {
				return 0, wire.CodeNotOwner, fmt.Errorf("replication from %s: %w", node, err)
			}
		}
	}
	return replaced, 0, nil
}

// importRound installs a checked round. A full copy replaces the slots'
// state and pairs: first the keys of the copied slots that the round does
// not carry are deleted (those it carries are overwritten in place) and the
// pairs there forgotten, then the round's states and pairs are installed
// (all were read at once on the head). The caller holds mu.
func (s *Server) importRound(round []wire.Replicate, replaces bool) {
	if replaces {
		carried := carriedKeys(round)
		for _, m := range round {
			for _, r := range m.Replace {
				t := s.tables[r.Table]
				for i := 0; i < len(r.Slots); i += 2 {
					for sl := r.Slots[i]; sl < r.Slots[i+1]; sl++ {
						t.store.DeleteSlot(sl, carried[tableSlot{r.Table, sl}])
					}
				}
				s.pairMu.Lock()
				s.dedup.drop(r.Table, r.Slots)
				s.ledger.replaced(r.Table, r.Slots)
				s.pairMu.Unlock()
			}
		}
	}
	for _, m := range round {
		for _, st := range m.States {
			t := s.tables[st.Table]
			if st.Keys != nil {
				t.store.Import(st.Keys, st.Floats)
			} else {
				t.store.ImportRun(st.Lo, st.Floats)
			}
		}
		s.pairMu.Lock()
		for _, d := range m.Deferred {
			s.held.add(d)
		}
		for _, pr := range m.Pairs {
			s.dedup.add(pr.Client, pr.Seq, pr.Acked, pr.Table, pr.Slots)
			s.held.drop(pr.Client, pr.Seq)
			s.ledger.installed(pr)
		}
		s.pairMu.Unlock()
	}
}

// carriedKeys returns, by table and slot, the bitmap of the keys whose
// state round carries.
func carriedKeys(round []wire.Replicate) map[tableSlot]uint64 {
	out := map[tableSlot]uint64{}
	for _, m := range round {
		for _, st := range m.States {
			for sp := range stateKeys(st).Spans() {
				out[tableSlot{st.Table, sp.Slot}] |= sp.Bits()
			}
		}
	}
	return out
}

// checkHead reports an error unless server sender heads every slot of st.
func checkHead(rm *ring.Map, sender int, st wire.State) error {
	if sender < 0 {
		return errors.New("sender is not in the layout")
	}
	for sp := range stateKeys(st).Spans() {
		if h := rm.SlotOwner(sp.Slot); h != sender {
			return fmt.Errorf("slot %d is headed by %s", sp.Slot, rm.Servers[h].ID)
		}
	}
	return nil
}
