package rm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/history"
)

// Provider is where machines come from: a cloud, a local set of processes
// or a recorded trace (docs/design/market.md maps it onto EC2, GCP and
// Kubernetes). A provider reports machine events (Ready, Notice with its
// deadline, Gone) and price changes to the handler it was built with.
type Provider interface {
	Acquire(ctx context.Context, r market.Request) ([]market.MachineID, error)
	Release(ctx context.Context, id market.MachineID) error
	// Past returns every market's prices and availability up to now.
	Past(ctx context.Context) (history.View, error)
	Bill(ctx context.Context) (market.Bill, error)
}

// Job is what the manager needs of the training job.
type Job interface {
	Status() JobStatus
	Checkpoint(ctx context.Context) error
}

// JobStatus is the job's progress, in updates (one worker minibatch push).
type JobStatus struct {
	Done, Total float64
	// Rate is the updates per hour now, Stage the tier stage (0 without
	// tiers).
	Rate  float64
	Stage int
	// Working says the job is making progress (not waiting for machines
	// or restarting).
	Working bool
	// Checkpointed is the work saved by the last checkpoint, at
	// CheckpointAt.
	Checkpointed float64
	CheckpointAt time.Time
}

// Holding is one machine held and what is known of it.
type Holding struct {
	market.Machine
	Noticed  bool
	Deadline time.Time
}

// Running says the machine is up and not on notice.
func (h Holding) Running() bool { return !h.Ready.IsZero() && !h.Noticed }

// State is everything a policy is told: the past of the markets, the
// machines held, the job's progress and the event that woke it (nil on
// its own timer).
type State struct {
	View  history.View
	Held  []Holding
	Job   JobStatus
	Event *market.Event
}

// Plan is a policy's decision.
type Plan struct {
	Acquire    []market.Request
	Release    []market.MachineID
	Checkpoint bool
	// Wake asks to be asked again at that time (zero: only on events).
	Wake time.Time
}

// Policy decides which machines to hold. It must be a function of the
// State it is given.
type Policy interface {
	Name() string
	Decide(s State) Plan
}

// Counts are what the manager saw happen.
type Counts struct {
	Acquisitions int // machines that came up
	Evictions    int // machines the provider took away
	Refused      int // requests the provider could not meet
}

// Manager applies a policy's plans to a provider.
type Manager struct {
	prov   Provider
	pol    Policy
	job    Job
	held   map[market.MachineID]*Holding
	wake   time.Time
	counts Counts
}

// NewManager returns a manager of policy pol over provider prov for job.
func NewManager(prov Provider, pol Policy, job Job) *Manager {
	return &Manager{prov: prov, pol: pol, job: job, held: map[market.MachineID]*Holding{}}
}

// Wake is when the policy asked to be asked again (zero: never).
func (m *Manager) Wake() time.Time { return m.wake }

// Counts returns the counters so far.
func (m *Manager) Counts() Counts { return m.counts }

// Held returns the machines held, in the order they were acquired.
func (m *Manager) Held() []Holding {
	out := make([]Holding, 0, len(m.held))
	for _, h := range m.held {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Start asks the policy for its first plan.
func (m *Manager) Start(ctx context.Context) error { return m.decide(ctx, nil) }

// Handle records a provider event and asks the policy what to do.
func (m *Manager) Handle(ctx context.Context, ev market.Event) error {
	switch ev.Kind {
	case market.Ready:
		if h := m.held[ev.Machine.ID]; h != nil {
			h.Ready = ev.Machine.Ready
			m.counts.Acquisitions++
		}
	case market.Notice:
		if h := m.held[ev.Machine.ID]; h != nil {
			h.Noticed, h.Deadline = true, ev.Deadline
		}
	case market.Gone:
		if _, ok := m.held[ev.Machine.ID]; !ok {
			return nil // released by us: already forgotten
		}
		delete(m.held, ev.Machine.ID)
		if ev.By == market.ByProvider {
			m.counts.Evictions++
		}
	}
	return m.decide(ctx, &ev)
}

// Tick asks the policy again if its wake time has come.
func (m *Manager) Tick(ctx context.Context, now time.Time) error {
	if m.wake.IsZero() || now.Before(m.wake) {
		return nil
	}
	m.wake = time.Time{}
	return m.decide(ctx, nil)
}

// Release gives back machine id (the job is done, say); a machine no
// longer held (evicted meanwhile) is not an error.
func (m *Manager) Release(ctx context.Context, id market.MachineID) error {
	if _, ok := m.held[id]; !ok {
		return nil
	}
	delete(m.held, id)
	if err := m.prov.Release(ctx, id); err != nil {
		return fmt.Errorf("release machine %d: %w", id, err)
	}
	return nil
}

func (m *Manager) decide(ctx context.Context, ev *market.Event) error {
	view, err := m.prov.Past(ctx)
	if err != nil {
		return fmt.Errorf("market history: %w", err)
	}
	plan := m.pol.Decide(State{View: view, Held: m.Held(), Job: m.job.Status(), Event: ev})
	for _, id := range plan.Release {
		if _, ok := m.held[id]; !ok {
			continue
		}
		delete(m.held, id)
		if err := m.prov.Release(ctx, id); err != nil {
			return fmt.Errorf("release machine %d: %w", id, err)
		}
	}
	for _, r := range plan.Acquire {
		if err := m.acquire(ctx, r, view.Now); err != nil {
			return err
		}
	}
	if plan.Checkpoint {
		if err := m.job.Checkpoint(ctx); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if !plan.Wake.IsZero() {
		m.wake = plan.Wake
	}
	return nil
}

func (m *Manager) acquire(ctx context.Context, r market.Request, now time.Time) error {
	ids, err := m.prov.Acquire(ctx, r)
	if errors.Is(err, market.ErrBidBelowPrice) || errors.Is(err, market.ErrNoCapacity) {
		m.counts.Refused++
		return nil // the market said no this time; the policy hears of the next change
	}
	if err != nil {
		return fmt.Errorf("acquire %d %s in %s: %w", r.Count, r.Class, r.Market, err)
	}
	for _, id := range ids {
		m.held[id] = &Holding{Machine: market.Machine{ID: id, Market: r.Market, Class: r.Class, Bid: r.Bid, Alloc: int64(ids[0]), Requested: now}}
	}
	return nil
}
