package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/security/pki"
)

// TestCertsDaysRefused: --days 0 or below is refused, naming the flag; it
// used to issue a certificate of the default validity without a word. So
// is a --days too long for a time.Duration, which issued a certificate
// expiring on a wrapped-around date (100000000 days: 80136 days left).
func TestCertsDaysRefused(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "--dir", dir, "--days", "0"},
		{"issue", "--dir", dir, "--name", "n", "--hosts", "127.0.0.1", "--days", "-3"},
		// More than a time.Duration holds: it wrapped round to another date.
		{"init", "--dir", dir, "--days", "100000000"},
		{"issue", "--dir", dir, "--name", "n", "--hosts", "127.0.0.1", "--days", "100000000"},
	} {
		c := certsCmd()
		c.SetArgs(args)
		c.SetOut(io.Discard)
		c.SetErr(io.Discard)
		if err := c.Execute(); err == nil || !strings.Contains(err.Error(), "--days") {
			t.Errorf("certs %v: %v, want a refusal naming --days", args, err)
		}
	}
}

// TestCoordinatorCertificateNamesItsEtcd: a coordinator whose
// certificate does not name its embedded etcd's client address (127.0.0.1
// by default) is refused at once, saying so; it failed after seconds with
// "etcd unavailable: context deadline exceeded".
func TestCoordinatorCertificateNamesItsEtcd(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Init(dir, "", pki.Options{}); err != nil {
		t.Fatal(err)
	}
	node, err := pki.Issue(dir, "coord", []string{"localhost"}, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := coordinatorCmd()
	c.SetArgs([]string{"--listen", "127.0.0.1:0", "--tls-dir", node})
	c.SetOut(io.Discard)
	c.SetErr(io.Discard)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "127.0.0.1 in --hosts") {
		t.Fatalf("coordinator with a certificate for localhost only: %v", err)
	}
}
