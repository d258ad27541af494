package main

import (
	"io"
	"strings"
	"testing"
)

// TestCertsDaysRefused: --days 0 or below is refused, naming the flag; it
// used to issue a certificate of the default validity without a word.
func TestCertsDaysRefused(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "--dir", dir, "--days", "0"},
		{"issue", "--dir", dir, "--name", "n", "--hosts", "127.0.0.1", "--days", "-3"},
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
