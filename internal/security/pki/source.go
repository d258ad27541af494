package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ErrExpired: the node's own certificate is past its validity, found when
// it is loaded, so that the node says so itself instead of every peer
// refusing it with a less specific alert.
var ErrExpired = errors.New("pki: certificate expired")

// Source serves a node's certificate and its trusted CAs to TLS, and
// re-reads the files whenever their modification time or size changes
// (checked at most once per checkEvery), so that rotated certificates are
// used by the next handshake without a restart. A rotation that leaves
// unreadable or mismatched files keeps the last good pair and reports the
// error to the caller of Reload, and to Warn once for each new error.
type Source struct {
	files Files
	every time.Duration // checkEvery; 0 in tests, to check at every use
	// Warn, when set (before the source is used), is told why the files
	// changed on disk are not used: a broken rotation was silent, and
	// the node served its old certificate until it expired.
	Warn func(error)

	mu      sync.Mutex
	warned  string // the last error told to Warn, "" since a good load
	checked time.Time
	stamp   [3]stamp
	cert    *tls.Certificate
	pool    *x509.CertPool
}

type stamp struct {
	mod  time.Time
	size int64
}

// checkEvery bounds how often the files are stat'ed: a node under load
// handshakes many times a second, rotation is an operator's act.
const checkEvery = time.Second

// NewSource reads files, failing if they do not make a usable pair and
// CA pool.
func NewSource(f Files) (*Source, error) {
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return nil, fmt.Errorf("pki: %w: need a CA, a certificate and a key file", ErrInvalid)
	}
	s := &Source{files: f, every: checkEvery}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Files returns the files the source reads.
func (s *Source) Files() Files { return s.files }

// Reload re-reads the files now if they changed.
func (s *Source) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked(true)
}

func (s *Source) reloadLocked(force bool) error {
	now := time.Now()
	if !force && now.Sub(s.checked) < s.every {
		return nil
	}
	s.checked = now
	var st [3]stamp
	for i, p := range []string{s.files.CA, s.files.Cert, s.files.Key} {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pki: %w", err)
		}
		st[i] = stamp{fi.ModTime(), fi.Size()}
	}
	if s.cert != nil && st == s.stamp {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return fmt.Errorf("pki: %s and %s: %w", s.files.Cert, s.files.Key, err)
	}
	if now.After(cert.Leaf.NotAfter) {
		return fmt.Errorf("pki: %s: %w on %s", s.files.Cert, ErrExpired, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cas, err := ReadCerts(s.files.CA)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	s.cert, s.pool, s.stamp, s.warned = &cert, pool, st, ""
	return nil
}

// current returns the newest good certificate and pool.
func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A failed reload keeps the last good pair: a half-done rotation must
	// not take the node off the cluster.
	if err := s.reloadLocked(false); err != nil && s.Warn != nil && err.Error() != s.warned {
		s.warned = err.Error()
		s.Warn(err)
	}
	return s.cert, s.pool
}

// Leaf returns the node's current certificate.
func (s *Source) Leaf() *x509.Certificate {
	c, _ := s.current()
	return c.Leaf
}

// ServerConfig is the TLS configuration of a listener: it presents the
// current certificate and requires a client certificate signed by a
// current CA.
func (s *Source) ServerConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, pool := s.current()
		return &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{*cert},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			// Bulk streams: full-size records from the first byte.
			DynamicRecordSizingDisabled: true,
		}, nil
	}
	return base
}

// ClientConfig is the TLS configuration of one dial to serverName: it
// trusts the current CAs, checks the server's name, and presents the
// current certificate.
func (s *Source) ClientConfig(serverName string) *tls.Config {
	_, pool := s.current()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    pool,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, _ := s.current()
			return c, nil
		},
		DynamicRecordSizingDisabled: true,
	}
}
