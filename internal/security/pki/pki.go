package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File names inside a CA directory and inside a node's directory. A node's
// directory is what --tls-dir names: everything the node needs, and no
// CA key, so it can be copied to a machine of the market as it is.
const (
	CACert   = "ca.crt"
	CAKey    = "ca.key"
	NodeCert = "node.crt"
	NodeKey  = "node.key"
)

// Defaults for new certificates.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultNodeValidity = 365 * 24 * time.Hour
)

var (
	// ErrExists: init or issue would overwrite a key.
	ErrExists = errors.New("pki: already exists")
	// ErrInvalid: a file is not the PEM it should be, or a name is unusable.
	ErrInvalid = errors.New("pki: invalid")
	// ErrOutlivesCA: a node certificate would be valid past its CA's
	// expiry (or the CA has expired), when every peer stops trusting it.
	ErrOutlivesCA = errors.New("pki: certificate would outlive its CA")
)

// Files names the three PEM files a node uses.
type Files struct {
	CA, Cert, Key string
}

// FilesIn returns the files of a node directory made by Issue.
func FilesIn(dir string) Files {
	return Files{CA: filepath.Join(dir, CACert), Cert: filepath.Join(dir, NodeCert), Key: filepath.Join(dir, NodeKey)}
}

// Options of Init and Issue; zero fields take the defaults.
type Options struct {
	// Validity is how long the certificate is valid from NotBefore.
	Validity time.Duration
	// NotBefore is the start of validity (an hour ago, for clock skew).
	// Tests set it in the past to make expired certificates.
	NotBefore time.Time
}

func (o Options) window(def time.Duration) (time.Time, time.Time) {
	if o.Validity <= 0 {
		o.Validity = def
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	return o.NotBefore, o.NotBefore.Add(o.Validity)
}

// Init makes a cluster CA in dir: ca.crt and ca.key (0600). It refuses to
// overwrite an existing key, which would orphan every certificate issued.
func Init(dir, name string, o Options) error {
	if name == "" {
		name = "terrace cluster CA"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pki: init: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, CAKey)); err == nil {
		return fmt.Errorf("pki: init %s: %w: %s", dir, ErrExists, CAKey)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	nb, na := o.window(DefaultCAValidity)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"terrace"}},
		NotBefore:             nb,
		NotAfter:              na,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("pki: init: %w", err)
	}
	if err := writeKey(filepath.Join(dir, CAKey), key); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, CACert), "CERTIFICATE", der, 0o644)
}

// Issue makes a node certificate signed by the CA in caDir, valid for
// hosts (DNS names or IP addresses) as a server and as a client, since
// every node both listens and dials. It writes caDir/name/ with node.crt,
// node.key (0600) and a copy of ca.crt, and returns that directory.
func Issue(caDir, name string, hosts []string, o Options) (string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return "", fmt.Errorf("pki: issue: %w: node name %q", ErrInvalid, name)
	}
	// "a, b" and a trailing comma are the operator's spacing, not names.
	var named []string
	for _, h := range hosts {
		if h = strings.TrimSpace(h); h != "" {
			named = append(named, h)
		}
	}
	hosts = named
	if len(hosts) == 0 {
		return "", fmt.Errorf("pki: issue %s: %w: no hosts (the names and addresses peers dial it by)", name, ErrInvalid)
	}
	ca, caKey, err := loadCA(caDir)
	if err != nil {
		return "", err
	}
	out := filepath.Join(caDir, name)
	if _, err := os.Stat(filepath.Join(out, NodeKey)); err == nil {
		return "", fmt.Errorf("pki: issue %s: %w: %s (remove the directory to re-issue)", name, ErrExists, out)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	nb, na := o.window(DefaultNodeValidity)
	if err := withinCA(ca, caDir, nb, na); err != nil {
		return "", fmt.Errorf("pki: issue %s: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"terrace"}},
		NotBefore:    nb,
		NotAfter:     na,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", fmt.Errorf("pki: issue %s: %w", name, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	if err := writeKey(filepath.Join(out, NodeKey), key); err != nil {
		return "", err
	}
	if err := writePEM(filepath.Join(out, NodeCert), "CERTIFICATE", der, 0o644); err != nil {
		return "", err
	}
	caPEM, err := os.ReadFile(filepath.Join(caDir, CACert))
	if err != nil {
		return "", err
	}
	return out, writeFile(filepath.Join(out, CACert), caPEM, 0o644)
}

// withinCA checks that a node certificate valid from nb to na stays
// inside its CA's validity: a chain is verified against every
// certificate in it, so a node certificate outliving its CA is refused by
// every peer from the CA's expiry on, while `certs list` would show it
// valid.
func withinCA(ca *x509.Certificate, caDir string, nb, na time.Time) error {
	end := ca.NotAfter.UTC().Format(time.RFC3339)
	if !nb.Before(ca.NotAfter) {
		return fmt.Errorf("%w: the CA in %s expired on %s (make a new CA: security.md, Rotation)", ErrOutlivesCA, caDir, end)
	}
	if na.After(ca.NotAfter) {
		most := int(ca.NotAfter.Sub(nb).Hours() / 24)
		return fmt.Errorf("%w: valid until %s, past the expiry of the CA in %s on %s (at most %d days from now)",
			ErrOutlivesCA, na.UTC().Format(time.RFC3339), caDir, end, most)
	}
	return nil
}

// Info describes one certificate file, for `terrace certs list`.
type Info struct {
	Path      string
	Subject   string
	Issuer    string
	IsCA      bool
	Hosts     []string
	NotBefore time.Time
	NotAfter  time.Time
}

// Expired reports whether the certificate is out of its validity at now.
func (i Info) Expired(now time.Time) bool { return now.After(i.NotAfter) || now.Before(i.NotBefore) }

// List describes every certificate under dir (the CA, and each node
// directory's node.crt), sorted by path.
func List(dir string) ([]Info, error) {
	var out []Info
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".crt") || (filepath.Base(p) == CACert && filepath.Dir(p) != filepath.Clean(dir)) {
			return nil
		}
		certs, err := ReadCerts(p)
		if err != nil {
			return err
		}
		for _, c := range certs {
			in := Info{Path: p, Subject: c.Subject.CommonName, Issuer: c.Issuer.CommonName, IsCA: c.IsCA,
				Hosts: slices.Clone(c.DNSNames), NotBefore: c.NotBefore, NotAfter: c.NotAfter}
			for _, ip := range c.IPAddresses {
				in.Hosts = append(in.Hosts, ip.String())
			}
			out = append(out, in)
		}
		return nil
	})
	return out, err
}

// ReadCerts reads every certificate of a PEM file.
func ReadCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("pki: %s: %w: %v", path, ErrInvalid, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pki: %s: %w: no PEM certificate", path, ErrInvalid)
	}
	return out, nil
}

func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certs, err := ReadCerts(filepath.Join(dir, CACert))
	if err != nil {
		return nil, nil, fmt.Errorf("pki: CA in %s (run `terrace certs init` first): %w", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, CAKey))
	if err != nil {
		return nil, nil, fmt.Errorf("pki: CA key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, nil, fmt.Errorf("pki: %s: %w: no PEM key", CAKey, ErrInvalid)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: %w: %v", CAKey, ErrInvalid, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("pki: %s: %w: not an ECDSA key", CAKey, ErrInvalid)
	}
	return certs[0], ek, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// writeFile writes through a temporary file and a rename, so that a node
// reloading its certificate never reads half a file, and creates it with
// its final mode, so that a key is never readable by others, even briefly.
func writeFile(path string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
