package market

import (
	"errors"
	"fmt"
	"time"
)

// Class is a machine's reliability class: reliable machines (on-demand)
// are never evicted, transient ones (spot, preemptible) may be.
type Class int

const (
	Reliable Class = iota
	Transient
)

func (c Class) String() string {
	if c == Reliable {
		return "reliable"
	}
	return "transient"
}

// Market is one place machines are bought: an instance type in a zone.
type Market struct {
	Zone string
	Type string
}

func (m Market) String() string { return m.Zone + "/" + m.Type }

// Request asks a provider for Count machines of one market and class. Bid
// is the most a transient machine may cost per hour in a bid market (the
// machine is evicted when the price rises above it); zero means "pay the
// spot price" where the market has no bids.
type Request struct {
	Market Market
	Class  Class
	Count  int
	Bid    float64
}

// Validate reports a request no provider can meet.
func (r Request) Validate() error {
	switch {
	case r.Count <= 0:
		return fmt.Errorf("request for %d machines in %s: %w", r.Count, r.Market, ErrBadRequest)
	case r.Bid < 0:
		return fmt.Errorf("bid %g in %s: %w", r.Bid, r.Market, ErrBadBid)
	}
	return nil
}

// MachineID names a machine for its whole life.
type MachineID int64

// Machine is one machine a provider gave out.
type Machine struct {
	ID     MachineID
	Market Market
	Class  Class
	Bid    float64
	// Alloc is the request the machine came from: machines acquired
	// together share their billing hours.
	Alloc int64
	// Requested is when it was asked for, Ready when it came up (zero
	// while it boots).
	Requested, Ready time.Time
}

// EventKind says what happened.
type EventKind int

const (
	// Ready: a machine finished booting and is usable.
	Ready EventKind = iota
	// Notice: a machine will be taken away at Deadline.
	Notice
	// Gone: a machine is no longer there (By says who ended it).
	Gone
	// PriceChange: a market's spot price changed to Price.
	PriceChange
)

func (k EventKind) String() string {
	return [...]string{"ready", "notice", "gone", "price"}[k]
}

// EndedBy says who ended a machine's life: it decides the bill.
type EndedBy int

const (
	ByUser EndedBy = iota
	ByProvider
)

// Event is what a provider reports.
type Event struct {
	Kind     EventKind
	At       time.Time
	Machine  Machine
	Deadline time.Time // Notice
	By       EndedBy   // Gone
	Market   Market    // PriceChange
	Price    float64   // PriceChange
}

// Bill is what has been charged so far.
type Bill struct {
	Dollars float64
	Usage   map[MachineID]Usage
}

// Usage is one machine's life so far and what it was charged: Held is how
// long it was held (from its request), Free how much of that was not
// charged (a bid-market hour that ended in an eviction, EC2's first hour
// of an interrupted instance).
type Usage struct {
	Market     Market
	Class      Class
	Held, Free time.Duration
	Dollars    float64
}

var (
	// ErrBadRequest: a request with no machines.
	ErrBadRequest = errors.New("bad machine request")
	// ErrBadBid: a bid below zero.
	ErrBadBid = errors.New("bid below zero")
	// ErrBidBelowPrice: a bid below the market's current price.
	ErrBidBelowPrice = errors.New("bid below the current spot price")
	// ErrNoCapacity: the market has no machines to give.
	ErrNoCapacity = errors.New("no capacity in the market")
	// ErrUnknownMarket: the provider does not sell in that market.
	ErrUnknownMarket = errors.New("unknown market")
	// ErrUnknownMachine: no such machine is held.
	ErrUnknownMachine = errors.New("unknown machine")
)
