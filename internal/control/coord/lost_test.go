package coord

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/server"
)

// TestLost: a saved state's model is lost when no server of its layout
// answers as a process with a layout, and not lost while one does, or
// when its job was not under way. A new process at a saved server's
// address (a server restarted under its ID and port) holds nothing, and
// nor does another server there that a new coordinator configured: it
// answered with an epoch and was taken for the saved one.
func TestLost(t *testing.T) {
	ctx := context.Background()
	startServer := func(id string, configured bool) string {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := server.New(server.Options{ID: id})
		sctx, cancel := context.WithCancel(ctx)
		go s.Serve(sctx, ln)
		t.Cleanup(cancel)
		addr := ln.Addr().String()
		if configured {
			if err := s.Configure(&layout.Layout{Version: 1, Epoch: 7, Servers: []ring.Server{{ID: id, Addr: addr}}}); err != nil {
				t.Fatal(err)
			}
		}
		return addr
	}
	// A closed port: the process that listened there is gone.
	gone := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	saved := func(job, ready, done bool, addrs ...string) []byte {
		st := State{Layout: layout.Layout{Ready: ready, JobDone: done}, DoneBefore: 5}
		for i, a := range addrs {
			s := ring.Server{ID: string(rune('a' + i)), Addr: a}
			if i == 0 {
				st.Layout.Servers = append(st.Layout.Servers, s)
			} else {
				st.Layout.Backup = append(st.Layout.Backup, s)
			}
		}
		if job {
			st.Job = &api.Job{App: "lr"}
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	o := Options{FailureTimeout: 200 * time.Millisecond}
	const window = time.Second
	// The saved servers are a, b, ... by their place in addrs.
	liveA, liveB, fresh := startServer("a", true), startServer("b", true), startServer("a", false)
	other := startServer("other", true) // a server of a new cluster, at a's port
	for _, c := range []struct {
		name string
		blob []byte
		want bool
	}{
		{"every server gone", saved(true, true, false, gone(), gone()), true},
		{"a new process at the saved address", saved(true, true, false, fresh, gone()), true},
		{"another cluster's server at the saved address", saved(true, true, false, other, gone()), true},
		{"the ring server gone, a BackupPS alive", saved(true, true, false, gone(), liveB), false},
		{"the ring server alive", saved(true, true, false, liveA), false},
		{"no job", saved(false, true, false, gone()), false},
		{"the ring not formed", saved(true, false, false, gone()), false},
		{"the job done", saved(true, true, true, gone()), false},
		{"unreadable", []byte("{"), false},
	} {
		lost, ok := Lost(ctx, o, c.blob, window)
		if ok != c.want {
			t.Errorf("%s: lost = %v, want %v", c.name, ok, c.want)
		}
		if ok && lost.PassesDone != 5 {
			t.Errorf("%s: passes done %d, want 5", c.name, lost.PassesDone)
		}
	}
}
