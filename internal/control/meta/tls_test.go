package meta

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/security/pki"
)

// TestEmbeddedTLS: a member started with TLS files serves https with
// client-certificate auth: a client with a certificate of the cluster CA
// reads and writes, one without TLS is refused.
func TestEmbeddedTLS(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "pki")
	if err := pki.Init(ca, "", pki.Options{}); err != nil {
		t.Fatal(err)
	}
	out, err := pki.Issue(ca, "member", []string{"127.0.0.1"}, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := pki.FilesIn(out)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := StartEmbedded(ctx, EmbedConfig{Name: "tls", Dir: filepath.Join(dir, "data"), TLS: &TLSFiles{CA: f.CA, Cert: f.Cert, Key: f.Key}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got := e.Endpoints()[0]; got[:8] != "https://" {
		t.Fatalf("endpoint %s is not https", got)
	}
	src, err := pki.NewSource(f)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Open(ctx, e.Endpoints(), "/tls", WithTLS(src.ClientConfig("")))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	octx, ocancel := context.WithTimeout(ctx, time.Second)
	defer ocancel()
	if st, err := Open(octx, e.Endpoints(), "/tls"); err == nil {
		st.Close()
		t.Fatal("a client without TLS opened the member")
	}
}
