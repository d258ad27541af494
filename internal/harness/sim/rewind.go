package sim

import (
	"fmt"
	"slices"

	"github.com/terrace-ml/terrace/internal/placement/copies"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// Going back to a checkpoint (coordinator --on-copies-lost resume,
// docs/design/resilience.md): the simulation follows, from the layouts
// the coordinator publishes, when each checkpoint was asked for and when
// it ended, and when the cluster went back to one and was ready again,
// in the book's sequence of events. The checks that read it: a rewind
// decided while Copies says every slot pushed to kept a complete copy is
// needless (KindNeedlessRewind), and the final model and the reads owe,
// after a rewind, only what the checkpoint holds and what was
// acknowledged once the cluster was ready again (ExactlyOnce, Staleness).

// The kinds of violation of rewinds.
const (
	KindNeedlessRewind = "went back to a checkpoint with a complete copy of every slot left"
	KindRewound        = "a rewind's model is not the checkpoint's"
)

// rewinds is what the cluster's layouts said of checkpoints and rewinds,
// under Cluster.mu.
type rewinds struct {
	// asked and ended are the book events at which a layout first named
	// checkpoint seq, and first named none or another.
	asked, ended map[uint64]int64
	done         []rewind
	loading      bool // the latest layout loads a checkpoint gone back to
	lossesSeen   int  // the coordinator's losses counted at the last rewind
	figs         RewindFigures
}

// rewind is one time the cluster went back to checkpoint seq: at is the
// book event of the first layout that loaded it, ready that of the first
// ready layout after (0 until then).
type rewind struct {
	seq       uint64
	at, ready int64
}

// RewindFigures counts the rewinds of a run.
type RewindFigures struct {
	// Taken is the rewinds; Needless those decided on a loss of which
	// Copies says no slot pushed to lost every copy (a violation);
	// Unwritten those whose loss held no slot pushed to at all, which the
	// coordinator, seeing no pushes, cannot tell from a loss (not a
	// violation: a real job writes every slot of an arc).
	Taken, Needless, Unwritten int
}

func (r *rewinds) figures() RewindFigures { return r.figs }

// followRewinds records what layout l says of checkpoints and rewinds.
func (c *Cluster) followRewinds(l *layout.Layout) {
	if c.cfg.CheckpointEvery == 0 {
		return
	}
	loading := l.Resume != nil && l.Resume.Rewind > 0
	c.mu.Lock()
	r := &c.rewinds
	if r.asked == nil {
		r.asked, r.ended = map[uint64]int64{}, map[uint64]int64{}
	}
	if ck := l.Checkpoint; ck != nil && r.asked[ck.Seq] == 0 {
		r.asked[ck.Seq] = c.book.Mark()
	}
	for seq := range r.asked {
		if r.ended[seq] == 0 && (l.Checkpoint == nil || l.Checkpoint.Seq != seq) {
			r.ended[seq] = c.book.Mark()
		}
	}
	begins := loading && !r.loading
	if begins {
		r.done = append(r.done, rewind{seq: l.Resume.Seq, at: c.book.Mark()})
		r.figs.Taken++
	}
	if n := len(r.done); n > 0 && l.Ready && !loading && r.done[n-1].ready == 0 {
		r.done[len(r.done)-1].ready = c.book.Mark()
	}
	r.loading = loading
	since := int64(0)
	if n := len(r.done); n > 1 {
		since = r.done[n-2].at
	}
	c.mu.Unlock()
	if begins {
		c.Note("REWIND back to checkpoint %d (load %d)", l.Resume.Seq, l.Resume.Rewind)
		c.checkRewind(l.Resume.Seq, since)
	}
}

// checkRewind checks the rewind to checkpoint seq just seen against the
// losses the coordinator reported since the last rewind (since, a book
// event): some slot of theirs pushed to must have lost every copy, by
// Copies' account, after since.
func (c *Cluster) checkRewind(seq uint64, since int64) {
	st := c.coord.Status()
	c.mu.Lock()
	from := c.rewinds.lossesSeen
	c.rewinds.lossesSeen = st.CopiesLost
	c.mu.Unlock()
	// The status keeps the newest losses only: those since the last
	// rewind that it still has.
	losses := st.SlotLosses[max(0, len(st.SlotLosses)-(st.CopiesLost-from)):]
	var servers []string
	var written, lost []uint64
	end := c.book.Mark()
	for _, l := range losses {
		servers = append(servers, l.Servers...)
		var arcs []copies.Arc
		for _, a := range l.Arcs {
			arcs = append(arcs, copies.Arc{Lo: a.Lo, Hi: a.Hi})
		}
		// Slots first pushed to after the loss had nothing to lose.
		at := c.markOf(l.Version)
		for _, sl := range c.copies.Followed() {
			if copies.Contains(arcs, ring.SlotHash(sl)) && c.copies.TouchedBefore(sl, at) {
				written = append(written, sl)
			}
		}
	}
	slices.Sort(written)
	written = slices.Compact(written)
	for _, sl := range written {
		if at := c.copies.LossBefore(sl, end); at > since {
			lost = append(lost, sl)
		}
	}
	switch {
	case len(written) == 0:
		c.mu.Lock()
		c.rewinds.figs.Unwritten++
		c.mu.Unlock()
		c.Note("the rewind to checkpoint %d follows losses (servers %v) of no slot pushed to", seq, servers)
	case len(lost) == 0:
		c.mu.Lock()
		c.rewinds.figs.Needless++
		c.mu.Unlock()
		c.Violate(KindNeedlessRewind, "back to checkpoint %d after %d losses (servers %v) of slots %v pushed to, and Copies says each kept a complete copy", seq, len(losses), slices.Compact(slices.Sorted(slices.Values(servers))), written)
	}
}

// lastRewind returns the last rewind, and the one before it (at 0 if
// none), and whether there was one.
func (c *Cluster) lastRewind() (last, before rewind, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.rewinds.done)
	if n == 0 {
		return rewind{}, rewind{}, false
	}
	if n > 1 {
		before = c.rewinds.done[n-2]
	}
	return c.rewinds.done[n-1], before, true
}

// checkpointMarks returns the book events at which checkpoint seq was
// first named and ended (0 if never seen).
func (c *Cluster) checkpointMarks(seq uint64) (asked, ended int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rewinds.asked[seq], c.rewinds.ended[seq]
}

// rewoundBefore returns the book event from which increments are owed to
// a read at event, after the rewinds before it: the pushes begun before
// the cluster was ready again after the last rewind before event are
// not owed (they are the checkpoint's, or rolled back), and while it
// loads the checkpoint none is. 0 if no rewind came before event.
func (c *Cluster) rewoundBefore(event int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var cut int64
	for _, r := range c.rewinds.done {
		if r.at >= event {
			break
		}
		cut = event
		if r.ready > 0 && r.ready < event {
			cut = r.ready
		}
	}
	return cut
}

// lostBefore is Copies.LossBefore with the rewinds (rewoundBefore): the
// book event after which the pushes to slot sl are owed at event.
func (c *Cluster) lostBefore(sl uint64, event int64) int64 {
	return max(c.copies.LossBefore(sl, event), c.rewoundBefore(event))
}

// checkRewound is ExactlyOnce's check of key k after the last rewind r
// (prev the one before it, at 0 if none), whose final value is v, with
// u increments in flight: at least every increment acknowledged before
// the checkpoint was asked for (and after the slot last lost every copy,
// and after prev was ready again), and every one whose push began once
// the cluster was ready again; at most those whose push began before
// the checkpoint ended, or were acknowledged after the rewind, and the
// ones in flight. "" if it holds.
func (c *Cluster) checkRewound(k uint64, sl uint64, r, prev rewind, v, u int64) string {
	asked, ended := c.checkpointMarks(r.seq)
	if ended == 0 || ended > r.at {
		ended = r.at
	}
	var want int64
	if asked > 0 {
		lost := max(c.copies.LossBefore(sl, asked), prev.ready)
		want = c.book.Count(k, func(begun, at int64) bool { return begun > lost && at < asked })
	}
	if r.ready > 0 {
		want += c.book.Count(k, func(begun, _ int64) bool { return begun > r.ready })
	}
	most := u + c.book.Count(k, func(begun, at int64) bool { return begun < ended || at > r.at })
	if v < want || v > most {
		return fmt.Sprintf("key %d (slot %d): %d after going back to checkpoint %d, want %d to %d (the checkpoint's acknowledged increments and those after it was loaded; %d unconfirmed)", k, sl, v, r.seq, want, most, u)
	}
	return ""
}
