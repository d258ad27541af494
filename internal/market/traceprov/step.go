package traceprov

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
)

// Next is the time of the provider's next event: a price or availability
// change, a machine booted, a notice running out. Zero if none is left.
func (p *Provider) Next() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	next, _, _ := p.nextLocked()
	return next
}

// nextLocked finds the earliest pending event: a timer (index into
// p.timers) or a market change (the market).
func (p *Provider) nextLocked() (time.Time, int, *marketState) {
	var next time.Time
	ti, which := -1, (*marketState)(nil)
	if len(p.timers) > 0 {
		next, ti = p.timers[0].at, 0
	}
	for _, ms := range p.order {
		if t, ok := ms.nextChange(); ok && (next.IsZero() || t.Before(next)) {
			next, ti, which = t, -1, ms
		}
	}
	return next, ti, which
}

func (ms *marketState) nextChange() (time.Time, bool) {
	var t time.Time
	ok := false
	if ms.next < len(ms.series.Points) {
		t, ok = ms.series.Points[ms.next].At, true
	}
	if ms.tl != nil && ms.anext < len(ms.tl.Counts) {
		if a := ms.tl.Counts[ms.anext].At; !ok || a.Before(t) {
			t, ok = a, true
		}
	}
	return t, ok
}

// AdvanceTo moves the clock to t, applying every event up to it in time
// order and handing the handler what happened after each.
func (p *Provider) AdvanceTo(t time.Time) {
	for {
		p.mu.Lock()
		next, ti, ms := p.nextLocked()
		if next.IsZero() || next.After(t) {
			if t.After(p.now) {
				p.now = t
			}
			p.mu.Unlock()
			p.dispatch()
			return
		}
		p.now = next
		if ti >= 0 {
			p.fire(p.timers[0])
			p.timers = p.timers[1:]
		} else {
			p.change(ms)
		}
		p.mu.Unlock()
		p.dispatch()
	}
}

func (p *Provider) fire(tm timer) {
	m := p.machines[tm.id]
	if m == nil {
		return // released or gone before its timer
	}
	switch tm.kind {
	case market.Ready:
		if !m.noticed {
			m.Ready = p.now
			p.queue = append(p.queue, market.Event{Kind: market.Ready, At: p.now, Machine: m.Machine})
		}
	case market.Gone:
		p.end(m, market.ByProvider)
	}
}

// change applies a market's next price or availability change.
func (p *Provider) change(ms *marketState) {
	priceAt, _ := ms.nextChangeOfPrice()
	if ms.next < len(ms.series.Points) && priceAt.Equal(p.now) {
		pt := ms.series.Points[ms.next]
		ms.next++
		p.queue = append(p.queue, market.Event{Kind: market.PriceChange, At: p.now, Market: ms.series.Market, Price: pt.Price})
		p.evictBids(ms, pt.Price)
		return
	}
	prev := 0
	if ms.anext > 0 {
		prev = ms.tl.Counts[ms.anext-1].N
	}
	cur := ms.tl.Counts[ms.anext].N
	ms.anext++
	if !p.cfg.Model.BidEvicts() && cur < prev && prev > 0 {
		p.evictShare(ms, float64(prev-cur)/float64(prev))
	}
}

func (ms *marketState) nextChangeOfPrice() (time.Time, bool) {
	if ms.next < len(ms.series.Points) {
		return ms.series.Points[ms.next].At, true
	}
	return time.Time{}, false
}

// evictBids notices every transient machine of the market whose maximum
// price (its bid, or the model's default) is below price.
func (p *Provider) evictBids(ms *marketState, price float64) {
	for _, m := range p.transient(ms) {
		if p.cfg.Model.MaxPrice(m.Bid, ms.series.OnDemand) < price {
			p.notice(m)
		}
	}
}

// evictShare notices a share of the market's transient machines, oldest
// first, carrying the fraction that rounding leaves.
func (p *Provider) evictShare(ms *marketState, share float64) {
	live := p.transient(ms)
	ms.debt += share * float64(len(live))
	n := int(math.Floor(ms.debt + 1e-9))
	if share >= 1 {
		n = len(live)
	}
	n = min(n, len(live))
	ms.debt = max(0, ms.debt-float64(n))
	for _, m := range live[:n] {
		p.notice(m)
	}
}

func (p *Provider) notice(m *machine) {
	m.noticed = true
	deadline := p.now.Add(p.cfg.Model.Notice())
	p.queue = append(p.queue, market.Event{Kind: market.Notice, At: p.now, Machine: m.Machine, Deadline: deadline})
	p.addTimer(timer{at: deadline, id: m.ID, kind: market.Gone})
}

// transient returns the market's transient machines not yet on notice,
// oldest first.
func (p *Provider) transient(ms *marketState) []*machine {
	var out []*machine
	for _, m := range p.machines {
		if m.Market == ms.series.Market && m.Class == market.Transient && !m.noticed {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Clock is wall time, injected so that a compressed replay can be tested
// without sleeping.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Run replays in compressed time: trace time passes speedup times faster
// than clock time, and each event is applied when its time comes. It
// returns when the trace has no more events or ctx ends.
func (p *Provider) Run(ctx context.Context, clock Clock, speedup float64) error {
	wall0, trace0 := clock.Now(), p.Now()
	for {
		next := p.Next()
		if next.IsZero() {
			return nil
		}
		due := wall0.Add(time.Duration(float64(next.Sub(trace0)) / speedup))
		if wait := due.Sub(clock.Now()); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-clock.After(wait):
			}
		}
		p.AdvanceTo(next)
	}
}
