package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/auth"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/control/coordha"
	"github.com/terrace-ml/terrace/internal/control/meta"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/security/pki"
	"github.com/terrace-ml/terrace/internal/security/tlsnet"
)

// securityFlags are the TLS and join-token flags every node takes.
type securityFlags struct {
	dir, ca, cert, key string
	tokenFile          string
	tokens             string // the coordinator's tokens file
}

func (f *securityFlags) register(fs *pflag.FlagSet, coordinator bool) {
	fs.StringVar(&f.dir, "tls-dir", "", "mutual TLS on every connection, with ca.crt, node.crt and node.key of this directory (made by terrace certs issue)")
	fs.StringVar(&f.ca, "tls-ca", "", "mutual TLS: PEM file of the CAs to trust (instead of --tls-dir)")
	fs.StringVar(&f.cert, "tls-cert", "", "mutual TLS: PEM file of this node's certificate (instead of --tls-dir)")
	fs.StringVar(&f.key, "tls-key", "", "mutual TLS: PEM file of this node's private key (instead of --tls-dir)")
	if coordinator {
		fs.StringVar(&f.tokens, "tokens", "", "file of join tokens, lines of \"role token\" (roles: admin, server, worker, read); no tokens needed if empty")
		return
	}
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding this node's join token, re-read when it changes (default: $"+auth.EnvToken+")")
}

// files returns the PEM files, or ok false when TLS is off.
func (f *securityFlags) files() (_ pki.Files, ok bool, _ error) {
	some := f.ca != "" || f.cert != "" || f.key != ""
	switch {
	case f.dir != "" && some:
		return pki.Files{}, false, fmt.Errorf("tls: give --tls-dir or --tls-ca, --tls-cert and --tls-key, not both")
	case f.dir != "":
		return pki.FilesIn(f.dir), true, nil
	case some && (f.ca == "" || f.cert == "" || f.key == ""):
		return pki.Files{}, false, fmt.Errorf("tls: --tls-ca, --tls-cert and --tls-key go together")
	}
	return pki.Files{CA: f.ca, Cert: f.cert, Key: f.key}, some, nil
}

// network returns the TLS network, or nil when TLS is off.
func (f *securityFlags) network(inner transport.Network, log *slog.Logger) (*tlsnet.Network, error) {
	files, ok, err := f.files()
	if err != nil || !ok {
		return nil, err
	}
	src, err := pki.NewSource(files)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	src.Warn = func(err error) {
		log.Warn("tls: the certificate files changed but are not used: new connections present the last good pair", "err", err)
	}
	return tlsnet.New(inner, src, log), nil
}

// node returns a server's or worker's network and join token: TLS over
// inner (an emulated link, or TCP if nil) when TLS is asked for, else inner.
// The token comes from --token-file, followed as it changes
// (auth.NodeToken), else from the environment.
func (f *securityFlags) node(role auth.Role, inner transport.Network, log *slog.Logger) (transport.Network, func() string, error) {
	tok, err := f.token(role, log)
	if err != nil {
		return nil, nil, err
	}
	nw, err := f.network(inner, log)
	if err != nil {
		return nil, tok, err
	}
	if nw == nil {
		return inner, tok, nil
	}
	return nw, tok, nil
}

// token returns the node's join token of role, at each call.
func (f *securityFlags) token(role auth.Role, log *slog.Logger) (func() string, error) {
	if f.tokenFile == "" {
		tok, err := auth.ReadToken("", role, os.Getenv)
		return func() string { return tok }, err
	}
	nt, err := auth.OpenNodeToken(f.tokenFile, role, log)
	if err != nil {
		return nil, err
	}
	return nt.Token, nil
}

// client returns a client of the coordinator at addrs for a command that
// acts as role (status and events read, submit administers), and the
// network it dials on: mutual TLS with the role's token when the flags
// give them, so that the commands work on a cluster that requires both.
func (f *securityFlags) client(addrs string, role auth.Role) (*api.Client, transport.Network, error) {
	nw, tok, err := f.node(role, nil, newLogger("warn"))
	if err != nil {
		return nil, nil, err
	}
	cc := api.NewClient(addrs, nw)
	cc.Token = tok
	return cc, nw, nil
}

// reach waits up to within for a coordinator of cc to answer, saying on w
// at once, and every few seconds, that it waits and why: a command that
// rides out a failover looked hung for the whole wait when the address
// was mistyped or the coordinator down.
func reach(ctx context.Context, cc *api.Client, w io.Writer, within time.Duration) error {
	if d, ok := ctx.Deadline(); ok {
		// Not rounded: a deadline under half a second away rounded to
		// 0, and checkpoint --wait --timeout 400ms said a live
		// coordinator was unreachable.
		within = min(within, time.Until(d))
	}
	until := time.Now().Add(within)
	cc.Unreachable = func(addrs string, err error) {
		if left := time.Until(until).Round(time.Second); left > 0 { // else the error says it
			fmt.Fprintf(w, "terrace: coordinator %s unreachable (%v); retrying for %s more\n", addrs, err, left)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return cc.WaitReachable(ctx)
}

// coordinator sets up o and ha for TLS and tokens, and returns the
// network the in-memory coordinator listens on (nil: TCP).
func (f *securityFlags) coordinator(listen string, o *coord.Options, ha *coordha.Config, log *slog.Logger) (transport.Network, error) {
	nw, err := f.network(nil, log)
	if err != nil {
		return nil, err
	}
	if f.tokens != "" {
		toks, err := auth.OpenTokens(f.tokens, log)
		if err != nil {
			return nil, err
		}
		o.Wrap = auth.NewGuard(toks, log).WrapReporting
	}
	if host, _, err := net.SplitHostPort(listen); err == nil {
		if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && (nw == nil || f.tokens == "") {
			log.Warn("the control plane listens beyond this machine without both --tls-dir and --tokens: anyone who reaches it can join, read and drain the cluster", "listen", listen)
		}
	}
	if nw == nil {
		return nil, nil
	}
	files, _, _ := f.files()
	if len(ha.Endpoints) == 0 && ha.Embed.InitialCluster == "" {
		// The coordinator's etcd client dials its own embedded member,
		// checking that the certificate names the address: one that did
		// not failed after seconds with "etcd unavailable: context
		// deadline exceeded".
		if err := certNames(nw.Source().Leaf(), files.Cert, ha.Embed.ClientAddr, "--etcd-client"); err != nil {
			return nil, err
		}
	}
	o.Network = nw
	ha.Network = nw
	ha.EtcdTLS = nw.ClientTLS()
	ha.Embed.TLS = &meta.TLSFiles{CA: files.CA, Cert: files.Cert, Key: files.Key}
	return nw, nil
}

// certNames checks that cert (from the file path) names the host of
// addr, which flag sets and this node dials itself; an unspecified host
// (0.0.0.0) is not checked.
func certNames(cert *x509.Certificate, path, addr, flag string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
		return nil
	}
	if err := cert.VerifyHostname(host); err != nil {
		names := append(slices.Clone(cert.DNSNames), ipStrings(cert.IPAddresses)...)
		return fmt.Errorf("tls: %s names %s, not %s, which this coordinator's etcd client dials (%s %s): issue its certificate with %s in --hosts",
			path, strings.Join(names, ","), host, flag, addr, host)
	}
	return nil
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}
