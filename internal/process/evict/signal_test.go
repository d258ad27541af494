package evict

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

func TestSignal(t *testing.T) {
	// Catch SIGUSR1 here too, so that a signal sent before Watch has
	// registered does not kill the test binary.
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGUSR1)
	defer signal.Stop(guard)

	r := start(t, Signal{Signals: []os.Signal{syscall.SIGUSR1}})
	// Watch registers asynchronously: repeat the signal until it is seen.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(wait)
	var n Notice
loop:
	for {
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		select {
		case n = <-r.notices:
			break loop
		case <-tick.C:
		case <-deadline:
			t.Fatal("no notice after SIGUSR1")
		}
	}
	if n.Source != "signal" || !n.Deadline.IsZero() {
		t.Fatalf("notice %+v, want source signal and no deadline", n)
	}
	// Further signals are absorbed, not sent as notices.
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	r.noMoreNotices(t)
}

// A signal that comes after Catch and before Watch runs is a notice, not
// the signal's default action (SIGUSR1's, like SIGTERM's, ends the
// process: without Catch this test dies).
func TestCatchBeforeWatch(t *testing.T) {
	s := Catch(syscall.SIGUSR1)
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the runtime delivers it meanwhile
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make(chan Notice, 1)
	go s.Watch(ctx, out)
	select {
	case n := <-out:
		if n.Source != "signal" {
			t.Fatalf("notice %+v, want the signal's", n)
		}
	case <-ctx.Done():
		t.Fatal("no notice for a signal caught before Watch")
	}
}
