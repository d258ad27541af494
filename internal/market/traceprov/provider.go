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
	usage    map[market.MachineID]market.Usage // ended machines
	queue    []market.Event
	// dispatching: the handler is running (dispatch is not re-entered).
	dispatching bool
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
		machines: map[market.MachineID]*machine{}, usage: map[market.MachineID]market.Usage{}}
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
		case p.cfg.Model.MaxPrice(r.Bid, ms.series.OnDemand) < price:
			return nil, fmt.Errorf("bid %g (maximum %g) < price %g in %s: %w", r.Bid, p.cfg.Model.MaxPrice(r.Bid, ms.series.OnDemand), price, r.Market, market.ErrBidBelowPrice)
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
	b := market.Bill{Dollars: p.closed, Usage: make(map[market.MachineID]market.Usage, len(p.usage)+len(p.machines))}
	for id, u := range p.usage {
		b.Usage[id] = u
	}
	for id, m := range p.machines {
		if !m.gone {
			u := p.use(m, market.ByUser)
			b.Usage[id] = u
			b.Dollars += u.Dollars
		}
	}
	return b, nil
}

// use is a machine's usage if it ended now, by by (under p.mu).
func (p *Provider) use(m *machine, by market.EndedBy) market.Usage {
	u := market.Usage{Market: m.Market, Class: m.Class, Held: p.now.Sub(m.Requested), Dollars: p.charge(m, p.now, by)}
	if m.Class == market.Transient {
		u.Free = p.cfg.Model.Free(m.Requested, p.now, by)
	}
	return u
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
	u := p.use(m, by)
	p.closed += u.Dollars
	p.usage[m.ID] = u
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
// handler's own calls may queue more. It is not re-entered: a Release
// the handler makes queues its event behind those already waiting, which
// the outer dispatch delivers once the handler returns, so the handler
// never sees an event in the middle of its own decision.
func (p *Provider) dispatch() {
	p.mu.Lock()
	if p.dispatching {
		p.mu.Unlock()
		return
	}
	p.dispatching = true
	for len(p.queue) > 0 {
		ev := p.queue[0]
		p.queue = p.queue[1:]
		p.mu.Unlock()
		if p.cfg.Handler != nil {
			p.cfg.Handler(ev)
		}
		p.mu.Lock()
	}
	p.dispatching = false
	p.mu.Unlock()
}
