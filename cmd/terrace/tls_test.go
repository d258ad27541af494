package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/auth"
	"github.com/terrace-ml/terrace/internal/security/pki"
	"github.com/terrace-ml/terrace/internal/security/tlsnet"
)

// tlsLogBuf collects a process's output while the test reads it.
type tlsLogBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *tlsLogBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *tlsLogBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tlsWaitFor reads lines of out into log until one contains s.
func tlsWaitFor(t *testing.T, out *bufio.Reader, log *tlsLogBuf, s string) string {
	t.Helper()
	for {
		line, err := out.ReadString('\n')
		log.Write([]byte(line))
		if err != nil {
			t.Fatalf("waiting for %q: %v\n%s", s, err, log)
		}
		if strings.Contains(line, s) {
			go io.Copy(log, out)
			return line
		}
	}
}

// tlsCluster is a certificate authority, its node certificates, a tokens
// file and strangers' certificates, all on disk as an operator makes them.
type tlsCluster struct {
	dir, ca, tokens string
}

func newTLSCluster(t *testing.T) tlsCluster {
	t.Helper()
	dir := t.TempDir()
	c := tlsCluster{dir: dir, ca: filepath.Join(dir, "ca"), tokens: filepath.Join(dir, "tokens")}
	run := func(args ...string) {
		if out, err := exec.Command(terrace(t), args...).CombinedOutput(); err != nil {
			t.Fatalf("terrace %v: %v\n%s", args, err, out)
		}
	}
	run("certs", "init", "--dir", c.ca)
	for _, n := range []string{"coord", "s0", "w0", "probe"} {
		run("certs", "issue", "--dir", c.ca, "--name", n, "--hosts", "127.0.0.1")
	}
	run("tokens", "new", "--out", c.tokens)
	other := filepath.Join(dir, "other")
	run("certs", "init", "--dir", other)
	run("certs", "issue", "--dir", other, "--name", "stranger", "--hosts", "127.0.0.1")
	if _, err := pki.Issue(c.ca, "old", []string{"127.0.0.1"}, pki.Options{NotBefore: time.Now().Add(-72 * time.Hour), Validity: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c tlsCluster) node(name string) string { return filepath.Join(c.ca, name) }

func (c tlsCluster) token(t *testing.T, role auth.Role) string {
	tok, err := auth.ReadToken(c.tokens, role, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// probe is an api.Client of the test itself, with the "probe" certificate
// (or files), that does not retry.
func (c tlsCluster) probe(t *testing.T, addr string, files pki.Files, token string) *api.Client {
	src, err := pki.NewSource(files)
	if err != nil {
		t.Fatal(err)
	}
	cl := api.NewClient(addr, tlsnet.New(nil, src, nil))
	cl.Token, cl.RetryFor = func() string { return token }, time.Millisecond
	return cl
}

// TestTLSClusterRefusesStrangers runs a coordinator, a server and a worker
// as separate processes with mutual TLS and join tokens, and while the
// cluster waits for its worker, connects to the coordinator and to the
// server in every way they must refuse; then the worker trains.
func TestTLSClusterRefusesStrangers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newTLSCluster(t)
	var coordLog, serverLog tlsLogBuf
	_, out := start(t, ctx, "coordinator", "--listen", "127.0.0.1:0", "--servers", "1", "--workers", "1", "--replication", "1",
		"--tls-dir", c.node("coord"), "--tokens", c.tokens, "--log-level", "info", "--exit-when-done", "--dashboard-listen", "127.0.0.1:0")
	f := strings.Fields(tlsWaitFor(t, out, &coordLog, "listening on"))
	// The dashboard view's line comes first, read on the way.
	_, line, _ := strings.Cut(coordLog.String(), "dashboard (read-only, plain HTTP) on ")
	view, _, _ := strings.Cut(line, "/\n")
	addr := strings.TrimSuffix(f[slicesIndex(f, "on")+1], ",")
	// The server holds its role's line alone, as the README says: with
	// every role's file it reported as admin, and no test saw that its
	// own token could not report a rebuild.
	serverToken := filepath.Join(c.dir, "server.token")
	if err := os.WriteFile(serverToken, []byte("server "+c.token(t, auth.RoleServer)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, sout := start(t, ctx, "server", "--coordinator", addr, "--id", "s0", "--tls-dir", c.node("s0"), "--token-file", serverToken, "--log-level", "warn")
	tlsWaitFor(t, sout, &serverLog, "joined")

	t.Run("dashboard view without a certificate, read-only", func(t *testing.T) {
		for _, tc := range []struct {
			method, path string
			want         int
		}{
			{"GET", "/", http.StatusOK},
			{"GET", "/v1/status", http.StatusOK},
			{"GET", "/v1/history", http.StatusOK},
			{"POST", "/v1/checkpoint", http.StatusMethodNotAllowed},
			{"GET", "/v1/layout", http.StatusNotFound},
			{"GET", "/v1/reports", http.StatusNotFound},
		} {
			req, _ := http.NewRequestWithContext(ctx, tc.method, view+tc.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s on the dashboard view: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
			}
		}
	})

	probeFiles := pki.FilesIn(c.node("probe"))
	t.Run("reads with a read token", func(t *testing.T) {
		l, err := c.probe(t, addr, probeFiles, c.token(t, auth.RoleRead)).Layout(ctx, 0)
		if err != nil || len(l.Servers) != 1 {
			t.Fatalf("layout %+v: %v", l, err)
		}
	})
	for _, tc := range []struct {
		name  string
		token auth.Role
		call  func(*api.Client) error
		want  error
	}{
		{"valid certificate, no token", "", func(cl *api.Client) error { _, err := cl.JoinWorker(ctx, "intruder", ""); return err }, api.ErrUnauthenticated},
		{"worker token asks for the server role", auth.RoleWorker, func(cl *api.Client) error { _, err := cl.JoinServer(ctx, "intruder", "127.0.0.1:1", ""); return err }, api.ErrForbidden},
		{"read token asks for a checkpoint", auth.RoleRead, func(cl *api.Client) error { _, err := cl.RequestCheckpoint(ctx, false); return err }, api.ErrForbidden},
		{"server token asks for a checkpoint", auth.RoleServer, func(cl *api.Client) error { _, err := cl.RequestCheckpoint(ctx, false); return err }, api.ErrForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := ""
			if tc.token != "" {
				tok = c.token(t, tc.token)
			}
			if err := tc.call(c.probe(t, addr, probeFiles, tok)); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("another CA's certificate", func(t *testing.T) {
		files := pki.FilesIn(filepath.Join(c.dir, "other", "stranger"))
		files.CA = probeFiles.CA // it trusts the cluster, the cluster does not trust it
		_, err := c.probe(t, addr, files, c.token(t, auth.RoleAdmin)).Layout(ctx, 0)
		if err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a node whose TLS does not match fails at once", func(t *testing.T) {
		mixed := pki.FilesIn(filepath.Join(c.dir, "other", "stranger"))
		mixed.CA = probeFiles.CA // the cluster refuses its certificate (an alert)
		for name, files := range map[string]pki.Files{"another CA's certificate": mixed, "another CA": pki.FilesIn(filepath.Join(c.dir, "other", "stranger"))} {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second) // under the 30 s a node waits for an absent coordinator
			err := c.probe(t, addr, files, "").WaitReachable(wctx)
			cancel()
			if !errors.Is(err, api.ErrTLSMismatch) {
				t.Errorf("%s: %v, want %v", name, err, api.ErrTLSMismatch)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(wctx, terrace(t), "server", "--coordinator", addr, "--token-file", c.tokens).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "TLS does not match") || !strings.Contains(string(out), "--tls-dir") {
			t.Errorf("a server without --tls-dir: %v\n%s", err, out)
		}
	})
	t.Run("wrong host name", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(addr)
		_, err := c.probe(t, "localhost:"+port, probeFiles, c.token(t, auth.RoleRead)).Layout(ctx, 0)
		if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "does not name the address dialled") {
			t.Fatalf("got %v", err)
		}
	})
	pool := func() *tls.Config {
		src, err := pki.NewSource(probeFiles)
		if err != nil {
			t.Fatal(err)
		}
		return src.ClientConfig("127.0.0.1")
	}
	expired, err := tls.LoadX509KeyPair(filepath.Join(c.node("old"), pki.NodeCert), filepath.Join(c.node("old"), pki.NodeKey))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cert []tls.Certificate
		want string
	}{
		{"no certificate", nil, "certificate required"},
		{"expired certificate", []tls.Certificate{expired}, "expired certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := pool()
			cfg.GetClientCertificate, cfg.Certificates = nil, tc.cert
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
			_, err := hc.Get("https://" + addr + "/v1/layout")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	t.Run("status, events and submit with a certificate and the role's token", func(t *testing.T) {
		run := func(args ...string) (string, error) {
			cmd := exec.CommandContext(ctx, terrace(t), append(args, "--coordinator", addr, "--tls-dir", c.node("probe"), "--token-file", c.tokens)...)
			b, err := cmd.CombinedOutput()
			return string(b), err
		}
		if out, err := run("status"); err != nil || !strings.Contains(out, "s0") {
			t.Fatalf("status: %v\n%s", err, out)
		}
		if out, err := run("events"); err != nil || !strings.Contains(out, "s0") {
			t.Fatalf("events: %v\n%s", err, out)
		}
		// The job the worker below brings: submitting it first with the
		// admin token leaves that worker nothing to disagree with.
		job := filepath.Join(t.TempDir(), "job.yaml")
		os.WriteFile(job, []byte("app: lr\npasses: 2\ntrain: "+repoFile("datasets/a9a/a9a.gz")+"\ntest: "+repoFile("datasets/a9a/a9a.t.gz")+"\n"), 0o600)
		if out, err := run("submit", job); err != nil || !strings.Contains(out, "job submitted") {
			t.Fatalf("submit: %v\n%s", err, out)
		}
		plain := exec.CommandContext(ctx, terrace(t), "status", "--coordinator", addr)
		if out, err := plain.CombinedOutput(); err == nil {
			t.Fatalf("status without a certificate answered:\n%s", out)
		}
	})
	t.Run("a node's /metrics is mutual TLS too", func(t *testing.T) {
		_, rest, ok := strings.Cut(serverLog.String(), "metrics on ")
		url, _, _ := strings.Cut(rest, "\n")
		if !ok || !strings.HasPrefix(url, "https://") {
			t.Fatalf("the server announced no https metrics address:\n%s", serverLog.String())
		}
		if resp, err := http.Get("http" + strings.TrimPrefix(url, "https")); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Fatalf("plain HTTP scrape answered %s", resp.Status)
			}
		}
		noCert := pool()
		noCert.GetClientCertificate = nil
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: noCert}, Timeout: 10 * time.Second}
		if _, err := hc.Get(url); err == nil || !strings.Contains(err.Error(), "certificate required") {
			t.Fatalf("scrape without a certificate: %v", err)
		}
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: pool()}, Timeout: 10 * time.Second}
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "terrace_") {
			t.Fatalf("scrape with the cluster's certificate: %s\n%.300s", resp.Status, body)
		}
	})
	t.Run("oversized body", func(t *testing.T) {
		src, _ := pki.NewSource(probeFiles)
		nw := tlsnet.New(nil, src, nil)
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, a string) (net.Conn, error) { return nw.Dial(ctx, a) }}}
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/v1/join", io.LimitReader(tlsZeros{}, auth.MaxBody+1))
		req.ContentLength = auth.MaxBody + 1
		req.Header.Set("Authorization", "Bearer "+c.token(t, auth.RoleAdmin))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413", resp.StatusCode)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		l, err := c.probe(t, addr, probeFiles, c.token(t, auth.RoleRead)).Layout(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{addr, l.Servers[0].Addr} {
			nc, err := net.Dial("tcp", a)
			if err != nil {
				t.Fatal(err)
			}
			nc.Write([]byte("garbage that is no handshake\x00\xff\x16\x03\x01"))
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadAll(nc); err != nil {
				t.Errorf("%s: the refusal did not close the connection: %v", a, err)
			}
			nc.Close()
		}
	})

	// The healthy cluster trains, and says what it refused.
	dir := t.TempDir()
	w := exec.CommandContext(ctx, terrace(t), "worker", "--coordinator", addr, "--id", "w0", "--tls-dir", c.node("w0"),
		"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"), "--epochs", "2",
		"--report", filepath.Join(dir, "w0.json"))
	w.Env = append(os.Environ(), auth.EnvToken+"="+c.token(t, auth.RoleWorker))
	if b, err := w.CombinedOutput(); err != nil {
		t.Fatalf("worker: %v\n%s", err, b)
	}
	acc := tlsTestAccuracy(t, filepath.Join(dir, "w0.json"))
	if acc < 0.84 {
		t.Errorf("test accuracy %.4f with TLS, want >= 0.84", acc)
	}
	for _, want := range []string{"refused request", "a worker token may not act as server", "refused connection",
		"client didn't provide a certificate", "not signed by this cluster's CA", "has expired", "does not speak TLS"} {
		if !strings.Contains(coordLog.String(), want) {
			t.Errorf("the coordinator's log does not say %q:\n%s", want, coordLog.String())
		}
	}
	if !strings.Contains(serverLog.String(), "refused connection") {
		t.Errorf("the server's log shows no refusal:\n%s", serverLog.String())
	}
	if strings.Contains(serverLog.String(), "could not report") {
		t.Errorf("the server's own token could not report to the coordinator:\n%s", serverLog.String())
	}
	if testing.Verbose() {
		t.Logf("coordinator:\n%s\nserver:\n%s", coordLog.String(), serverLog.String())
	}
}

type tlsZeros struct{}

func (tlsZeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func tlsTestAccuracy(t *testing.T, path string) float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		TestAccuracy float64 `json:"test_accuracy"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep.TestAccuracy
}

// TestTLSTrainsLikePlain trains lr on a three-process cluster (a
// coordinator, a server, a worker) with mutual TLS and tokens and again
// without, and compares their test metrics. It takes about a minute, so it
// runs only with TERRACE_TLS_E2E=1 (see .ci/run).
func TestTLSTrainsLikePlain(t *testing.T) {
	if os.Getenv("TERRACE_TLS_E2E") == "" {
		t.Skip("set TERRACE_TLS_E2E=1 to train with and without TLS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newTLSCluster(t)
	train := func(secure bool) (acc, auc float64) {
		var sec func(node string) []string
		if secure {
			sec = func(node string) []string {
				return []string{"--tls-dir", c.node(node), "--token-file", c.tokens}
			}
		} else {
			sec = func(string) []string { return nil }
		}
		var coordLog, serverLog tlsLogBuf
		coordSec := sec("coord")
		if secure {
			coordSec = []string{"--tls-dir", c.node("coord"), "--tokens", c.tokens}
		}
		_, out := start(t, ctx, append([]string{"coordinator", "--listen", "127.0.0.1:0", "--servers", "1", "--workers", "1",
			"--replication", "1", "--exit-when-done"}, coordSec...)...)
		f := strings.Fields(tlsWaitFor(t, out, &coordLog, "listening on"))
		addr := strings.TrimSuffix(f[slicesIndex(f, "on")+1], ",")
		_, sout := start(t, ctx, append([]string{"server", "--coordinator", addr, "--id", "s0", "--log-level", "warn"}, sec("s0")...)...)
		tlsWaitFor(t, sout, &serverLog, "joined")
		rep := filepath.Join(t.TempDir(), "w0.json")
		b, err := exec.CommandContext(ctx, terrace(t), append([]string{"worker", "--coordinator", addr, "--id", "w0",
			"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"), "--epochs", "5",
			"--report", rep}, sec("w0")...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("worker (TLS %v): %v\n%s", secure, err, b)
		}
		raw, err := os.ReadFile(rep)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			TestAccuracy float64 `json:"test_accuracy"`
			TestAUC      float64 `json:"test_auc"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		t.Logf("TLS %v: test accuracy %.4f, AUC %.4f", secure, r.TestAccuracy, r.TestAUC)
		return r.TestAccuracy, r.TestAUC
	}
	pAcc, pAUC := train(false)
	sAcc, sAUC := train(true)
	// One worker under ASP: the runs differ only in timing, by at most a
	// few examples' worth of staleness.
	if d := sAcc - pAcc; d < -0.003 || d > 0.003 {
		t.Errorf("test accuracy %.4f with TLS, %.4f without", sAcc, pAcc)
	}
	if d := sAUC - pAUC; d < -0.003 || d > 0.003 {
		t.Errorf("test AUC %.4f with TLS, %.4f without", sAUC, pAUC)
	}
}
