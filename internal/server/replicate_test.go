package server

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// TestReplicationToAMutePeerGivesUp: a peer that takes replication frames
// and never confirms them does not hold the replicator (and so every push
// of its slots) for ever: send fails after replicateQuiet, and the loop
// warns, reconnects and sends again.
func TestReplicationToAMutePeerGivesUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c) // reads everything, answers nothing
		}
	}()
	defer func(d time.Duration) { replicateQuiet = d }(replicateQuiet)
	replicateQuiet = 100 * time.Millisecond
	r := &replicator{s: New(Options{ID: "a"}), peer: ring.Server{ID: "b", Addr: ln.Addr().String()}, stop: make(chan struct{})}
	conn, err := r.dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	done := make(chan error, 1)
	go func() { done <- r.send(conn, []wire.Replicate{{}, {}}) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("replication to a peer that confirmed nothing succeeded")
		}
		t.Log(err)
	case <-time.After(time.Minute):
		t.Fatal("replication to a mute peer still waiting after a minute")
	}
}
