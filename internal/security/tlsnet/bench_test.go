package tlsnet

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/security/pki"
)

// BenchmarkStream copies 4 MiB writes one way over loopback, plain and
// with TLS: the cost of TLS itself, below the data plane.
func BenchmarkStream(b *testing.B) {
	benchNetworks(b, func(c net.Conn) { io.Copy(io.Discard, c) }, func(b *testing.B, c net.Conn) {
		buf := make([]byte, 4<<20)
		b.SetBytes(int64(len(buf)))
		b.ResetTimer()
		for b.Loop() {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPingPong times a 64-byte request and its 64-byte answer over
// loopback, plain and with TLS: what TLS adds to a small call's latency.
func BenchmarkPingPong(b *testing.B) {
	echo := func(c net.Conn) {
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}
	benchNetworks(b, echo, func(b *testing.B, c net.Conn) {
		buf := make([]byte, 64)
		for b.Loop() {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchNetworks runs bench, as sub-benchmarks tcp and tls, on a
// connection to a listener whose one accepted connection serve handles.
func benchNetworks(b *testing.B, serve func(net.Conn), bench func(*testing.B, net.Conn)) {
	dir := b.TempDir()
	ca := filepath.Join(dir, "ca")
	if err := pki.Init(ca, "", pki.Options{}); err != nil {
		b.Fatal(err)
	}
	out, err := pki.Issue(ca, "n", []string{"127.0.0.1"}, pki.Options{})
	if err != nil {
		b.Fatal(err)
	}
	src, err := pki.NewSource(pki.FilesIn(out))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		nw   transport.Network
	}{{"tcp", transport.TCP}, {"tls", New(nil, src, nil)}} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := tc.nw.Listen("127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				serve(c)
			}()
			c, err := tc.nw.Dial(context.Background(), ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			bench(b, c)
		})
	}
}
