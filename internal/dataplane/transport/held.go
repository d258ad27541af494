package transport

import (
	"context"
	"errors"
	"net"
	"sync"
)

// Held is a Network whose Listen hands out listeners opened beforehand by
// Hold: a process claims its fixed ports before it commits to anything
// that another process would see, and keeps them until its own servers
// take them, so that nothing can take a port in between. Dial, and
// Listen on an address not held, go to the inner network.
type Held struct {
	inner Network
	mu    sync.Mutex
	held  map[string]net.Listener
}

// NewHeld returns a Held over inner (TCP if nil), holding nothing yet.
func NewHeld(inner Network) *Held {
	return &Held{inner: OrTCP(inner), held: map[string]net.Listener{}}
}

// Hold listens on addr now, on the inner network, and keeps the listener
// for the first Listen of the same addr.
func (h *Held) Hold(addr string) error {
	ln, err := h.inner.Listen(addr)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[addr] = ln
	return nil
}

// Dial dials on the inner network.
func (h *Held) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return h.inner.Dial(ctx, addr)
}

// Listen returns the listener held for addr, once; otherwise it listens
// on the inner network.
func (h *Held) Listen(addr string) (net.Listener, error) {
	h.mu.Lock()
	ln, ok := h.held[addr]
	delete(h.held, addr)
	h.mu.Unlock()
	if ok {
		return ln, nil
	}
	return h.inner.Listen(addr)
}

// Close closes the listeners held and never taken.
func (h *Held) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for addr, ln := range h.held {
		errs = append(errs, ln.Close())
		delete(h.held, addr)
	}
	return errors.Join(errs...)
}
