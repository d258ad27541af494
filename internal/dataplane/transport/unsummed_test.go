package transport

import (
	"bytes"
	"errors"
	"net"
	"testing"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// authPipe is one end of a pipe that claims to authenticate its bytes,
// as tlsnet's connections do.
type authPipe struct{ net.Conn }

func (authPipe) Authenticated() bool { return true }

// TestUnsummedOnlyWhereAuthenticated: a connection that authenticates
// sends a frame built for it unsummed and takes unsummed frames; a plain
// one sums the same frame as it writes it (a retry on another
// connection), and refuses an unsummed frame from its peer.
func TestUnsummedOnlyWhereAuthenticated(t *testing.T) {
	payload := bytes.Repeat([]byte{3}, 1000)
	h := wire.Header{Type: wire.TPush, ReqID: 5}
	for _, tc := range []struct {
		name               string
		sendAuth, recvAuth bool
		wantFlag           bool
		wantErr            error
	}{
		{"both authenticate", true, true, true, nil},
		{"a plain writer sums it", false, false, false, nil},
		{"a plain reader refuses it", true, false, true, wire.ErrUnsummed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			var na, nb net.Conn = a, b
			if tc.sendAuth {
				na = authPipe{a}
			}
			if tc.recvAuth {
				nb = authPipe{b}
			}
			ca, cb := NewConn(na, 0), NewConn(nb, 0)
			defer ca.Close()
			defer cb.Close()
			if ca.Authenticated() != tc.sendAuth || cb.Authenticated() != tc.recvAuth {
				t.Fatal("Authenticated does not follow the connection")
			}
			ca.Send(Outgoing{Frame: wire.NewFrameOn(h, true, payload)})
			got, err := cb.Reader.Next()
			if err != nil {
				t.Fatal(err)
			}
			if flag := got.Flags&wire.FlagUnsummed != 0; flag != tc.wantFlag {
				t.Fatalf("frame unsummed %v on the wire, want %v", flag, tc.wantFlag)
			}
			p, err := cb.Reader.Payload(got)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("payload: %v, want %v", err, tc.wantErr)
			}
			if err == nil && !bytes.Equal(p, payload) {
				t.Fatal("payload changed")
			}
		})
	}
}
