package coord

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// The event timeline (docs/design/observe.md): the Machine notes what
// happened in its Ready; the driver numbers the events, stamps the epoch
// it publishes with them, keeps the last MaxEvents of each class
// (api.RoutineEvent) and hands them to an EventStore once the state they
// describe is saved.

// MaxEvents bounds each class of the timeline kept in memory and in the
// store: the routine events (grants and splits) and the others.
const MaxEvents = 1000

// EventStore keeps the timeline where a coordinator's successor finds it
// (etcd, under coordha). PutEvents adds events, numbered in order, and
// forgets those of each class older than kept says (writing none of
// them); Events returns those it holds, oldest first.
type EventStore interface {
	PutEvents(ctx context.Context, evs []api.Event, kept api.EventsKept) error
	Events(ctx context.Context) ([]api.Event, error)
}

// note records an event of kind on node, for the next Ready.
func (m *Machine) note(kind, node, cause string) {
	m.out.Events = append(m.out.Events, api.Event{Time: m.now, Kind: kind, Node: node, Cause: cause})
	if kind == api.EventFailed || kind == api.EventLeft {
		if m.st.Gone == nil {
			m.st.Gone = map[string]string{}
		}
		m.st.Gone[node] = kind
	}
}

// workerName names rank by its ID, for events.
func (m *Machine) workerName(rank int) string {
	for id, r := range m.st.Workers {
		if r == rank {
			return id
		}
	}
	return fmt.Sprintf("rank-%d", rank)
}

// passOf returns the number of pass w.
func (m *Machine) passOf(w *Pass) int {
	for e, p := range m.st.Passes {
		if p == w {
			return e
		}
	}
	return -1
}

// eventLog is the timeline in memory: the last MaxEvents events of each
// class, each class in order, and a channel closed whenever more arrive,
// for followers. The classes are kept apart so that forgetting the
// oldest of one costs nothing: kept as one slice, every grant's event
// moved the two thousand before it (3% of a coordinator's processor time
// in a pass of 32,561 partitions, more than its state machine took).
type eventLog struct {
	mu             sync.Mutex
	routine, other []api.Event
	next           uint64 // the next sequence number
	changed        chan struct{}
}

func newEventLog() *eventLog { return &eventLog{next: 1, changed: make(chan struct{})} }

// keep appends e to its class.
func (l *eventLog) keep(e api.Event) {
	if api.RoutineEvent(e.Kind) {
		l.routine = append(l.routine, e)
	} else {
		l.other = append(l.other, e)
	}
}

// add numbers evs, stamps epoch on each, and keeps them.
func (l *eventLog) add(evs []api.Event, epoch uint64) []api.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]api.Event, len(evs))
	for i, e := range evs {
		e.Seq, e.Epoch = l.next, epoch
		l.next++
		out[i] = e
		l.keep(e)
	}
	l.trim()
	close(l.changed)
	l.changed = make(chan struct{})
	return out
}

// load replaces the log with evs, saved by a previous leader, oldest
// first.
func (l *eventLog) load(evs []api.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.routine, l.other = nil, nil
	for _, e := range evs {
		l.keep(e)
	}
	l.trim()
	if n := len(evs); n > 0 {
		l.next = max(l.next, evs[n-1].Seq+1)
	}
}

// trim forgets the oldest events of each class beyond MaxEvents; l.mu is
// held.
func (l *eventLog) trim() {
	l.routine = l.routine[max(0, len(l.routine)-MaxEvents):]
	l.other = l.other[max(0, len(l.other)-MaxEvents):]
}

// kept returns where each class of the log starts.
func (l *eventLog) kept() api.EventsKept {
	l.mu.Lock()
	defer l.mu.Unlock()
	var k api.EventsKept
	if len(l.routine) > 0 {
		k.Routine = l.routine[0].Seq
	}
	if len(l.other) > 0 {
		k.Other = l.other[0].Seq
	}
	return k
}

// after returns the events numbered above seq, in order, waiting for one
// until ctx ends if wait is set.
func (l *eventLog) after(ctx context.Context, seq uint64, wait bool) []api.Event {
	from := func(evs []api.Event) []api.Event {
		i, _ := slices.BinarySearchFunc(evs, seq+1, func(e api.Event, s uint64) int { return cmp.Compare(e.Seq, s) })
		return evs[i:]
	}
	for {
		l.mu.Lock()
		r, o := from(l.routine), from(l.other)
		evs := make([]api.Event, 0, len(r)+len(o))
		for len(r) > 0 || len(o) > 0 {
			if len(o) == 0 || len(r) > 0 && r[0].Seq < o[0].Seq {
				evs, r = append(evs, r[0]), r[1:]
			} else {
				evs, o = append(evs, o[0]), o[1:]
			}
		}
		ch := l.changed
		l.mu.Unlock()
		if len(evs) > 0 || !wait {
			return evs
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return []api.Event{}
		}
	}
}

func (l *eventLog) last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Events returns the timeline's events numbered above after, oldest
// first; with wait it waits for one until ctx ends.
func (c *Coordinator) Events(ctx context.Context, after uint64, wait bool) []api.Event {
	return c.events.after(ctx, after, wait)
}

// SetEventStore loads the timeline a previous leader saved in s, notes
// this coordinator's (named self) taking over if there was one, and saves
// every event from now on in s. Call it before Run.
func (c *Coordinator) SetEventStore(ctx context.Context, s EventStore, self string) error {
	evs, err := s.Events(ctx)
	if err != nil {
		return fmt.Errorf("coordinator: loading the event timeline: %w", err)
	}
	c.events.load(evs)
	c.mu.Lock()
	c.eventStore = s
	restored, lost := c.restored, c.resumedLost
	c.mu.Unlock()
	if restored {
		c.event(func(m *Machine) {
			m.note(api.EventLeader, self, "took over: state restored from etcd")
		})
	}
	if lost.msg != "" {
		c.event(func(m *Machine) { m.note(api.EventCheckpoint, lost.self, lost.msg) })
	}
	return nil
}

// NoteResumedLost records on the timeline, once it is loaded
// (SetEventStore), that coordinator self resumed from a checkpoint over
// a saved state whose servers were all gone, as msg says.
func (c *Coordinator) NoteResumedLost(self, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resumedLost.self, c.resumedLost.msg = self, msg
}

// Resuming returns the checkpoint a coordinator opened with Resume starts
// from, and the passes it holds (ok false when it resumes none).
func (c *Coordinator) Resuming() (seq uint64, passes int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.m.st.Layout.Resume
	if r == nil {
		return 0, 0, false
	}
	return r.Seq, r.Pass + 1, true
}

// refusalEvery is the least time between two refusal events: a stranger
// hammering the API must not flood the timeline, which is bounded.
const refusalEvery = time.Second

// refusals rate-limits NoteRefused.
type refusals struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

// NoteRefused records on the timeline that a request from peer was
// refused (by the join tokens' guard), at most one event a second: the
// next event counts those it stands for.
func (c *Coordinator) NoteRefused(peer, cause string) {
	r := &c.refused
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < refusalEvery {
		r.skipped++
		r.mu.Unlock()
		return
	}
	skipped := r.skipped
	r.last, r.skipped = now, 0
	r.mu.Unlock()
	if skipped > 0 {
		cause = fmt.Sprintf("%s (and %d more refused since the last such event)", cause, skipped)
	}
	c.event(func(m *Machine) { m.note(api.EventRefused, peer, cause) })
}

// recordLocked numbers and keeps rd's events under the epoch now
// published, and returns them for the store; c.mu is held.
func (c *Coordinator) recordLocked(rd Ready) []api.Event {
	if len(rd.Events) == 0 {
		return nil
	}
	evs := c.events.add(rd.Events, c.published.Epoch)
	for _, e := range evs {
		c.metrics.event(e.Kind)
		c.log.Debug("event", "kind", e.Kind, "node", e.Node, "cause", e.Cause, "epoch", e.Epoch)
	}
	return evs
}

// saveEvents writes evs to the store, if there is one; a failure is
// logged, not fatal: the timeline is for people, the state is saved.
func (c *Coordinator) saveEvents(ctx context.Context, evs []api.Event) {
	c.mu.Lock()
	s := c.eventStore
	c.mu.Unlock()
	if s == nil || len(evs) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, saveTimeout)
	defer cancel()
	if err := s.PutEvents(sctx, evs, c.events.kept()); err != nil && ctx.Err() == nil {
		c.log.Warn("could not save events to the timeline's store", "events", len(evs), "err", err)
	}
}

// sample is the count of rows trained at a time, for the training rate.
type sample struct {
	at      time.Time
	trained int64
}
