package meta

import (
	"crypto/tls"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// TLSFiles are the PEM files an embedded member serves mutual TLS with,
// for clients and peers alike. etcd re-reads them at every handshake, so
// a rotated certificate takes effect without a restart.
type TLSFiles struct {
	CA, Cert, Key string
}

func (f *TLSFiles) apply(cfg *embed.Config) {
	if f == nil {
		return
	}
	info := transport.TLSInfo{CertFile: f.Cert, KeyFile: f.Key, TrustedCAFile: f.CA, ClientCertAuth: true}
	cfg.ClientTLSInfo = info
	cfg.PeerTLSInfo = info
	cfg.ClientAutoTLS, cfg.PeerAutoTLS = false, false
}

// OpenOption configures Open.
type OpenOption func(*openOptions)

type openOptions struct {
	tls *tls.Config
}

// WithTLS makes Open's client speak TLS with c (for https endpoints).
func WithTLS(c *tls.Config) OpenOption {
	return func(o *openOptions) { o.tls = c }
}

func openConfig(opts []OpenOption) openOptions {
	var o openOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}
