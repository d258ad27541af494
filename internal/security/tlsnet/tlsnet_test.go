package tlsnet

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/security/pki"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type pkis struct {
	ca, other string // CA directories
}

func makePKI(t *testing.T) pkis {
	t.Helper()
	p := pkis{ca: filepath.Join(t.TempDir(), "ca"), other: filepath.Join(t.TempDir(), "other")}
	for _, d := range []string{p.ca, p.other} {
		if err := pki.Init(d, "", pki.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	issue := func(dir, name string, hosts []string, o pki.Options) {
		if _, err := pki.Issue(dir, name, hosts, o); err != nil {
			t.Fatal(err)
		}
	}
	issue(p.ca, "srv", []string{"127.0.0.1"}, pki.Options{})
	issue(p.ca, "cli", []string{"127.0.0.1"}, pki.Options{})
	issue(p.ca, "elsewhere", []string{"db.example.invalid"}, pki.Options{})
	issue(p.ca, "old", []string{"127.0.0.1"}, pki.Options{NotBefore: time.Now().Add(-72 * time.Hour), Validity: 24 * time.Hour})
	issue(p.other, "stranger", []string{"127.0.0.1"}, pki.Options{})
	return p
}

func source(t *testing.T, f pki.Files) *pki.Source {
	t.Helper()
	s, err := pki.NewSource(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// echo serves ln: each connection reads 5 bytes and answers "ok"; the
// outcome of each connection goes to the returned channel.
func echo(t *testing.T, ln net.Listener) <-chan error {
	out := make(chan error, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 5)
				if _, err := io.ReadFull(c, b); err != nil {
					out <- err
					return
				}
				_, err := c.Write([]byte("ok"))
				out <- err
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return out
}

func listen(t *testing.T, p pkis, srv string, log *lockedBuf) (string, <-chan error, *Network) {
	t.Helper()
	n := New(nil, source(t, pki.FilesIn(filepath.Join(p.ca, srv))), slog.New(slog.NewTextHandler(log, nil)))
	n.HandshakeTimeout = 500 * time.Millisecond
	ln, err := n.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln.Addr().String(), echo(t, ln), n
}

// exchange writes hello and reads the answer.
func exchange(c net.Conn) error {
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		return err
	}
	b := make([]byte, 2)
	_, err := io.ReadFull(c, b)
	return err
}

func TestMutualTLS(t *testing.T) {
	p := makePKI(t)
	ctx := context.Background()
	var log lockedBuf
	addr, results, _ := listen(t, p, "srv", &log)
	cli := New(nil, source(t, pki.FilesIn(filepath.Join(p.ca, "cli"))), nil)
	c, err := cli.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := exchange(c); err != nil {
		t.Fatal(err)
	}
	if err := <-results; err != nil {
		t.Fatal(err)
	}

	// Each refusal: how the client connects, and what each side must say.
	keyPair := func(dir, name string) []tls.Certificate {
		c, err := tls.LoadX509KeyPair(filepath.Join(dir, name, pki.NodeCert), filepath.Join(dir, name, pki.NodeKey))
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	pool := source(t, pki.FilesIn(filepath.Join(p.ca, "cli"))).ClientConfig("127.0.0.1").RootCAs
	for _, tc := range []struct {
		name         string
		cfg          *tls.Config
		client, srv  string
		clientAtDial bool
	}{
		{"no certificate", &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, "certificate required", "didn't provide a certificate", false},
		{"another CA", &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: keyPair(p.other, "stranger")}, "unknown certificate authority", "not signed by this cluster's CA", false},
		{"expired", &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: keyPair(p.ca, "old")}, "expired certificate", "has expired", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			err = exchange(&clientConn{Conn: tls.Client(nc, tc.cfg), addr: addr})
			if !errors.Is(err, ErrPeerRefused) || !strings.Contains(err.Error(), tc.client) {
				t.Errorf("client: %v, want ErrPeerRefused saying %q", err, tc.client)
			}
			serr := <-results
			if !errors.Is(serr, ErrRefused) || !strings.Contains(serr.Error(), tc.srv) {
				t.Errorf("server: %v, want ErrRefused saying %q", serr, tc.srv)
			}
		})
	}

	t.Run("wrong host name", func(t *testing.T) {
		var log2 lockedBuf
		addr2, results2, _ := listen(t, p, "elsewhere", &log2)
		_, err := cli.Dial(ctx, addr2)
		if !errors.Is(err, ErrPeerRefused) || !strings.Contains(err.Error(), "does not name the address dialled") {
			t.Errorf("client: %v", err)
		}
		if serr := <-results2; !errors.Is(serr, ErrRefused) || !strings.Contains(serr.Error(), "bad certificate") {
			t.Errorf("server: %v", serr)
		}
	})

	t.Run("plain HTTP", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		io.WriteString(nc, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		b, _ := io.ReadAll(nc)
		if !strings.Contains(string(b), "400 Bad Request") || !strings.Contains(string(b), "mutual TLS") {
			t.Errorf("plain HTTP client got %q", b)
		}
		if serr := <-results; !errors.Is(serr, ErrRefused) || !strings.Contains(serr.Error(), "does not speak TLS") {
			t.Errorf("server: %v", serr)
		}
	})

	t.Run("silent client", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		// Say nothing: the handshake timeout must end the server's wait.
		if serr := <-results; !errors.Is(serr, ErrRefused) {
			t.Errorf("server: %v", serr)
		}
	})
	if !strings.Contains(log.String(), "refused connection") {
		t.Errorf("the server logged no refusal:\n%s", log.String())
	}
}

// TestRotation: a certificate replaced on disk is presented by the next
// handshake, without a new Network.
func TestRotation(t *testing.T) {
	p := makePKI(t)
	var log lockedBuf
	addr, results, srv := listen(t, p, "srv", &log)
	cli := New(nil, source(t, pki.FilesIn(filepath.Join(p.ca, "cli"))), nil)
	peer := func() string {
		c, err := cli.Dial(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := exchange(c); err != nil {
			t.Fatal(err)
		}
		<-results
		return c.(interface{ ConnectionState() tls.ConnectionState }).ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := peer(); got != "srv" {
		t.Fatalf("peer %q", got)
	}
	// Rotate: the server's node files now hold the certificate "cli".
	if _, err := pki.Issue(p.ca, "srv2", []string{"127.0.0.1"}, pki.Options{}); err != nil {
		t.Fatal(err)
	}
	f := srv.Source().Files()
	for src, dst := range map[string]string{filepath.Join(p.ca, "srv2", pki.NodeCert): f.Cert, filepath.Join(p.ca, "srv2", pki.NodeKey): f.Key} {
		if err := copyFile(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Source().Reload(); err != nil {
		t.Fatal(err)
	}
	if got := peer(); got != "srv2" {
		t.Fatalf("after rotation the server presents %q, want srv2", got)
	}
}

var _ transport.BuffersWriter = (*clientConn)(nil)
var _ transport.BuffersWriter = (*serverConn)(nil)
var _ transport.BuffersWriter = (*recConn)(nil)
