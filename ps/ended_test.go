package ps

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// TestNoWarningAsTheClusterEnds: a worker still finishing when its
// cluster ends with the job (--exit-when-done) installs the layout that
// says so as the servers exit; their refused dials are expected then,
// not warnings ("server unreachable" for each, by hand). A server that
// refuses while the job runs is still a warning.
func TestNoWarningAsTheClusterEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close() // a server that exited: its port refuses
	for _, tc := range []struct {
		name           string
		done, shutdown bool
		warn           bool
	}{
		{"the job runs", false, false, true},
		{"the job is done, the cluster stays up", true, false, true},
		{"the cluster ends with the job", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			c := &Client{log: slog.New(slog.NewTextHandler(&logs, nil)), opts: Options{Rank: 0}}
			l := &layout.Layout{Version: 2, Epoch: 1, Servers: []ring.Server{{ID: "s0", Addr: gone}}, JobDone: tc.done, Shutdown: tc.shutdown}
			if err := c.install(t.Context(), l); err == nil {
				t.Fatal("install with its only server gone: no error")
			}
			if got := strings.Contains(logs.String(), "server unreachable"); got != tc.warn {
				t.Fatalf("warned %v, want %v:\n%s", got, tc.warn, logs.String())
			}
		})
	}
}
