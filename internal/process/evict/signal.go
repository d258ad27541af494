package evict

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Signal is a notice that the process received one of Signals (default
// SIGTERM), which is how most schedulers and a machine's shutdown ask a
// process to leave. The notice has no deadline; Merge gives it the grace
// period.
//
// Watch keeps the signals caught until ctx ends, not just until the first
// one: on an evicted machine a second SIGTERM (the OS shutting down) often
// follows the provider's notice, and it must not kill the node in the
// middle of its drain. SIGKILL still ends the process.
type Signal struct {
	Signals []os.Signal
	caught  chan os.Signal // set by Catch
}

// Catch returns a Signal source for sigs (default SIGTERM) that catches
// them from now on, before its Watch runs. Sources are watched in
// goroutines, and a SIGTERM that came before one had called
// signal.Notify killed the process (the default action): a server told
// to stop while it waited for its coordinator died of it.
func Catch(sigs ...os.Signal) Signal {
	if len(sigs) == 0 {
		sigs = []os.Signal{syscall.SIGTERM}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	return Signal{Signals: sigs, caught: ch}
}

// Watch implements Source.
func (s Signal) Watch(ctx context.Context, out chan<- Notice) error {
	ch := s.caught
	if ch == nil {
		ch = Catch(s.Signals...).caught
	}
	defer signal.Stop(ch)
	select {
	case <-ctx.Done():
		return nil
	case sig := <-ch:
		send(ctx, out, Notice{Source: "signal", Detail: "received " + sig.String()})
	}
	// Later signals land in ch's buffer or are dropped by the runtime;
	// either way they are absorbed until the node stops watching.
	<-ctx.Done()
	return nil
}
