package data

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestSharedPath(t *testing.T) {
	if p, ok := SharedPath("no/such/file"); ok || p != "" {
		t.Errorf(`SharedPath("no/such/file") = %q, %v, want "", false`, p, ok)
	}
	p, ok := SharedPath("libsvm/a9a.gz")
	if !ok {
		t.Skip("../shared/data not present; nothing more to check")
	}
	if !filepath.IsAbs(p) || !strings.HasSuffix(p, filepath.Join("shared", "data", "libsvm", "a9a.gz")) {
		t.Errorf(`SharedPath("libsvm/a9a.gz") = %q`, p)
	}
}
