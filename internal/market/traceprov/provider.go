package traceprov

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/billing"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

// Config says what the provider replays.
type Config struct {
	Source *history.Source
	Model  billing.Model
	// Boot is how long a machine takes from its request to Ready.
	Boot time.Duration
	// Start is the provider's clock at the beginning.
	Start time.Time
	// Handler receives every event, in time order, outside the
	// provider's lock (it may call Acquire and Release).
	Handler func(market.Event)
}

// Provider replays a trace. Its clock moves only through AdvanceTo (or
// Run), so that a replay is deterministic and as fast as the CPU allows.
type Provider struct {
	cfg Config

	mu       sync.Mutex
	now      time.Time
	nextID   market.MachineID
	markets  map[market.Market]*marketState
	order    []*marketState // sorted by market, for deterministic ties
	machines map[market.MachineID]*machine
	timers   []timer // boots and notice deadlines, sorted by time then id
	closed   float64
	perMach  map[market.MachineID]float64
	queue    []market.Event
}

type marketState struct {
	series *trace.Series
	next   int // next price point to apply
	tl     *history.Timeline
	anext  int     // next availability point
	debt   float64 // fractional evictions carried (availability traces)
}

type machine struct {
	market.Machine
	noticed bool
	gone    bool
}

type timer struct {
	at   time.Time
	id   market.MachineID
	kind market.EventKind // Ready or Gone
}

// New returns a provider at cfg.Start.
func New(cfg Config) *Provider {
	p := &Provider{cfg: cfg, now: cfg.Start, markets: map[market.Market]*marketState{},
		machines: map[market.MachineID]*machine{}, perMach: map[market.MachineID]float64{}}
	for _, s := range cfg.Source.Prices.Series {
		ms := &marketState{series: s, tl: cfg.Source.Avail[s.Market]}
		ms.next = sort.Search(len(s.Points), func(i int) bool { return s.Points[i].At.After(cfg.Start) })
		if ms.tl != nil {
			ms.anext = sort.Search(len(ms.tl.Counts), func(i int) bool { return ms.tl.Counts[i].At.After(cfg.Start) })
		}
		p.markets[s.Market] = ms
		p.order = append(p.order, ms)
	}
	return p
}

// Now is the provider's clock.
func (p *Provider) Now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now
}

// Past is the View at the provider's clock.
func (p *Provider) Past(context.Context) (history.View, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.Source.Cut(p.now), nil
}

// Acquire asks for machines; they are Ready after the boot time.
func (p *Provider) Acquire(_ context.Context, r market.Request) ([]market.MachineID, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ms := p.markets[r.Market]
	if ms == nil {
		return nil, fmt.Errorf("%s: %w", r.Market, market.ErrUnknownMarket)
	}
	if r.Class == market.Transient {
		price, ok := ms.series.At(p.now)
		switch {
		case !ok:
			return nil, fmt.Errorf("%s has no price before %s: %w", r.Market, p.now.Format(time.RFC3339), market.ErrNoCapacity)
		case p.cfg.Model.BidEvicts() && r.Bid < price:
			return nil, fmt.Errorf("bid %g < price %g in %s: %w", r.Bid, price, r.Market, market.ErrBidBelowPrice)
		case !p.cfg.Model.BidEvicts() && ms.tl != nil && ms.tl.At(p.now) == 0:
			return nil, fmt.Errorf("%s at %s: %w", r.Market, p.now.Format(time.RFC3339), market.ErrNoCapacity)
		}
	}
	ids := make([]market.MachineID, r.Count)
	for i := range ids {
		p.nextID++
		id := p.nextID
		ids[i] = id
		p.machines[id] = &machine{Machine: market.Machine{ID: id, Market: r.Market, Class: r.Class, Bid: r.Bid, Alloc: int64(ids[0]), Requested: p.now}}
		p.addTimer(timer{at: p.now.Add(p.cfg.Boot), id: id, kind: market.Ready})
	}
	return ids, nil
}

// Release gives a machine back; it is charged as ended by the user.
func (p *Provider) Release(_ context.Context, id market.MachineID) error {
	p.mu.Lock()
	m := p.machines[id]
	if m == nil || m.gone {
		p.mu.Unlock()
		return fmt.Errorf("machine %d: %w", id, market.ErrUnknownMachine)
	}
	p.end(m, market.ByUser)
	p.mu.Unlock()
	p.dispatch()
	return nil
}

// Bill is what every machine has cost so far: ended machines as charged,
// running ones as if released now (each started hour counted).
func (p *Provider) Bill(context.Context) (market.Bill, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := market.Bill{Dollars: p.closed, PerMachine: map[market.MachineID]float64{}}
	for id, d := range p.perMach {
		b.PerMachine[id] = d
	}
	for id, m := range p.machines {
		if !m.gone {
			d := p.charge(m, p.now, market.ByUser)
			b.PerMachine[id] += d
			b.Dollars += d
		}
	}
	return b, nil
}

func (p *Provider) charge(m *machine, end time.Time, by market.EndedBy) float64 {
	ms := p.markets[m.Market]
	if m.Class == market.Reliable {
		return p.cfg.Model.Charge(nil, ms.series.OnDemand, m.Requested, end, by)
	}
	return p.cfg.Model.Charge(ms.series, ms.series.OnDemand, m.Requested, end, by)
}

// end closes a machine's life at the provider's clock (under p.mu).
func (p *Provider) end(m *machine, by market.EndedBy) {
	m.gone = true
	d := p.charge(m, p.now, by)
	p.closed += d
	p.perMach[m.ID] = d
	delete(p.machines, m.ID)
	p.queue = append(p.queue, market.Event{Kind: market.Gone, At: p.now, Machine: m.Machine, By: by})
}

func (p *Provider) addTimer(t timer) {
	i := sort.Search(len(p.timers), func(i int) bool {
		return p.timers[i].at.After(t.at) || (p.timers[i].at.Equal(t.at) && p.timers[i].id > t.id)
	})
	p.timers = append(p.timers, timer{})
	copy(p.timers[i+1:], p.timers[i:])
	p.timers[i] = t
}

// dispatch hands queued events to the handler, outside the lock; the
// handler's own calls may queue more.
func (p *Provider) dispatch() {
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.mu.Unlock()
			return
		}
		ev := p.queue[0]
		p.queue = p.queue[1:]
		p.mu.Unlock()
		if p.cfg.Handler != nil {
			p.cfg.Handler(ev)
		}
	}
}
