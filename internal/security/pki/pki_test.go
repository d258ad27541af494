package pki

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestInitIssueList(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, "", Options{}); err != nil {
		t.Fatal(err)
	}
	if err := Init(dir, "", Options{}); !errors.Is(err, ErrExists) {
		t.Fatalf("second init: %v, want ErrExists", err)
	}
	// What strings.Split makes of --hosts "", and of "a, b,".
	if _, err := Issue(dir, "none", []string{""}, Options{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("issue with --hosts \"\": %v, want ErrInvalid", err)
	}
	out, err := Issue(dir, "s0", []string{"127.0.0.1", " node-0.example", ""}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Issue(dir, "s0", []string{"127.0.0.1"}, Options{}); !errors.Is(err, ErrExists) {
		t.Fatalf("second issue: %v, want ErrExists", err)
	}
	for _, bad := range []string{"", "../x", "a/b"} {
		if _, err := Issue(dir, bad, []string{"h"}, Options{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("issue %q: %v, want ErrInvalid", bad, err)
		}
	}
	for _, key := range []string{filepath.Join(dir, CAKey), filepath.Join(out, NodeKey)} {
		fi, err := os.Stat(key)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", key, fi.Mode().Perm())
		}
	}
	infos, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || !infos[0].IsCA || infos[1].Subject != "s0" || !slices.Equal(infos[1].Hosts, []string{"node-0.example", "127.0.0.1"}) {
		t.Fatalf("list: %+v", infos)
	}
	if _, err := NewSource(FilesIn(out)); err != nil {
		t.Fatal(err)
	}
}

func TestExpiredCertificateRefusedAtLoad(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, "", Options{}); err != nil {
		t.Fatal(err)
	}
	out, err := Issue(dir, "old", []string{"127.0.0.1"}, Options{NotBefore: time.Now().Add(-48 * time.Hour), Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	infos, _ := List(dir)
	if !infos[1].Expired(time.Now()) {
		t.Fatal("list does not show the certificate expired")
	}
	if _, err := NewSource(FilesIn(out)); !errors.Is(err, ErrExpired) {
		t.Fatalf("loading an expired certificate: %v, want ErrExpired", err)
	}
}

// TestSourceReloads: a certificate replaced on disk is served without a
// new Source, and a broken replacement keeps the last good one.
func TestSourceReloads(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, "", Options{}); err != nil {
		t.Fatal(err)
	}
	a, _ := Issue(dir, "a", []string{"127.0.0.1"}, Options{})
	b, _ := Issue(dir, "b", []string{"127.0.0.1"}, Options{})
	src, err := NewSource(FilesIn(a))
	if err != nil {
		t.Fatal(err)
	}
	if got := src.Leaf().Subject.CommonName; got != "a" {
		t.Fatalf("leaf %q", got)
	}
	for _, f := range []string{NodeCert, NodeKey} {
		blob, _ := os.ReadFile(filepath.Join(b, f))
		if err := writeFile(filepath.Join(a, f), blob, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// No Reload: the next use finds the files changed (every TLS
	// callback goes through current, and so does Leaf).
	src.every = 0
	if got := src.Leaf().Subject.CommonName; got != "b" {
		t.Fatalf("after rotation the leaf is %q, want b", got)
	}
	// A broken rotation is told once (it was silent: the node served
	// its old certificate until it expired), however often it is used.
	var warned []error
	src.Warn = func(err error) { warned = append(warned, err) }
	if err := os.WriteFile(filepath.Join(a, NodeKey), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := src.Leaf().Subject.CommonName; got != "b" {
			t.Fatalf("after a bad rotation the leaf is %q, want the last good one", got)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0].Error(), NodeKey) {
		t.Fatalf("told %v, want the bad key once", warned)
	}
	if err := src.Reload(); err == nil {
		t.Fatal("reloading a garbage key succeeded")
	}
}

// TestIssueWithinCA: a node certificate that would outlive its CA, or one
// signed by a CA already expired, is refused with ErrInvalid, saying
// how many days are left; it was written and listed valid, while every
// peer refuses its chain from the CA's expiry on.
func TestIssueWithinCA(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, "", Options{Validity: 30 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	_, err := Issue(dir, "long", []string{"127.0.0.1"}, Options{Validity: 365 * 24 * time.Hour})
	if !errors.Is(err, ErrOutlivesCA) || !strings.Contains(err.Error(), "at most 29 days") {
		t.Fatalf("a node certificate past its CA's expiry: %v, want ErrInvalid with at most 29 days", err)
	}
	if _, err := Issue(dir, "short", []string{"127.0.0.1"}, Options{Validity: 20 * 24 * time.Hour}); err != nil {
		t.Fatalf("a node certificate inside its CA's validity: %v", err)
	}

	old := t.TempDir()
	if err := Init(old, "", Options{NotBefore: time.Now().Add(-72 * time.Hour), Validity: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := Issue(old, "n", []string{"127.0.0.1"}, Options{Validity: time.Hour}); !errors.Is(err, ErrOutlivesCA) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("issue from an expired CA: %v, want ErrInvalid saying it expired", err)
	}
}
