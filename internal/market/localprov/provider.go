package localprov

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/traceprov"
)

// Machines runs the processes of machines; drill.Cluster is one. Each
// call is carried out before it returns.
type Machines interface {
	// Start starts a machine of class and returns its name.
	Start(ctx context.Context, class market.Class) (string, error)
	// Notice gives every process of the machine its eviction notice.
	Notice(ctx context.Context, name string) error
	// Kill ends every process of the machine at once.
	Kill(ctx context.Context, name string) error
	// Drain asks every process of the machine to leave.
	Drain(ctx context.Context, name string) error
}

// Config says what the provider replays and on which processes. Trace's
// Handler is the provider's own; Handler receives every event once the
// processes have been told.
type Config struct {
	Trace    traceprov.Config
	Machines Machines
	Handler  func(market.Event)
}

// Provider implements rm.Provider: the trace provider decides, the
// machines' processes follow. A machine's processes start when the trace
// says it is Ready (its boot is the trace's), get the eviction notice
// with the trace's Notice, are killed at its Gone, and drain when the
// manager releases it.
type Provider struct {
	tp       *traceprov.Provider
	machines Machines
	handler  func(market.Event)
	ctx      context.Context

	mu    sync.Mutex
	names map[market.MachineID]string
	err   error // the first failure to carry out an event
}

// New returns a provider; ctx bounds the calls it makes to Machines from
// events (which have no context of their own).
func New(ctx context.Context, cfg Config) *Provider {
	p := &Provider{machines: cfg.Machines, handler: cfg.Handler, ctx: ctx, names: map[market.MachineID]string{}}
	tc := cfg.Trace
	tc.Handler = p.event
	p.tp = traceprov.New(tc)
	return p
}

// Trace is the trace provider that drives this one (its clock).
func (p *Provider) Trace() *traceprov.Provider { return p.tp }

// Err is the first event that could not be carried out on processes.
func (p *Provider) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Machine is the name of the processes' machine of id ("" before Ready).
func (p *Provider) Machine(id market.MachineID) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.names[id]
}

func (p *Provider) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

// event carries out a trace event on the processes, then passes it on.
// It runs outside the trace provider's lock (traceprov's guarantee), so
// the handler may call Acquire and Release.
func (p *Provider) event(ev market.Event) {
	id := ev.Machine.ID
	switch ev.Kind {
	case market.Ready:
		name, err := p.machines.Start(p.ctx, ev.Machine.Class)
		if err != nil {
			p.fail(fmt.Errorf("start machine %d (%s): %w", id, ev.Machine.Class, err))
			break
		}
		p.mu.Lock()
		p.names[id] = name
		p.mu.Unlock()
	case market.Notice:
		if name := p.Machine(id); name != "" {
			if err := p.machines.Notice(p.ctx, name); err != nil {
				p.fail(fmt.Errorf("notice to machine %d (%s): %w", id, name, err))
			}
		}
	case market.Gone:
		if name := p.Machine(id); name != "" && ev.By == market.ByProvider {
			if err := p.machines.Kill(p.ctx, name); err != nil {
				p.fail(fmt.Errorf("kill machine %d (%s): %w", id, name, err))
			}
		}
	}
	if p.handler != nil {
		p.handler(ev)
	}
}

// Acquire asks the trace for machines; their processes start at Ready.
func (p *Provider) Acquire(ctx context.Context, r market.Request) ([]market.MachineID, error) {
	return p.tp.Acquire(ctx, r)
}

// Release drains the machine's processes and ends it in the trace.
func (p *Provider) Release(ctx context.Context, id market.MachineID) error {
	var drainErr error
	if name := p.Machine(id); name != "" {
		if err := p.machines.Drain(ctx, name); err != nil {
			drainErr = fmt.Errorf("drain machine %d (%s): %w", id, name, err)
		}
	}
	return errors.Join(drainErr, p.tp.Release(ctx, id))
}

// Past is the trace's past at its clock.
func (p *Provider) Past(ctx context.Context) (history.View, error) { return p.tp.Past(ctx) }

// Bill is the trace's bill under its market model.
func (p *Provider) Bill(ctx context.Context) (market.Bill, error) { return p.tp.Bill(ctx) }

// Now is the trace's clock.
func (p *Provider) Now() time.Time { return p.tp.Now() }
