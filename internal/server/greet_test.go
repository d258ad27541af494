package server

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// TestSilentPeerNoWarning: a peer that connects and closes without a
// byte (a TCP health check, a client that gave up before its hello) is no
// warning; one that sends a frame other than hello still is. Each such
// close printed "refusing connection ... err=EOF" at WARN, amid a failed
// train's own error.
func TestSilentPeerNoWarning(t *testing.T) {
	for _, tc := range []struct {
		name string
		send []byte
		warn bool
	}{
		{"closed at once", nil, false},
		{"garbage", bytes.Repeat([]byte{0xff}, 64), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			s := New(Options{ID: "s0", Logger: slog.New(slog.NewTextHandler(&log, nil))})
			client, peer := net.Pipe()
			go func() {
				client.Write(tc.send)
				client.Close()
			}()
			s.serveConn(peer)
			if got := strings.Contains(log.String(), "level=WARN"); got != tc.warn {
				t.Errorf("warned %v, want %v:\n%s", got, tc.warn, log.String())
			}
		})
	}
}
