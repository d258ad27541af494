package evict

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFileAppears(t *testing.T) {
	path := filepath.Join(t.TempDir(), "evict")
	r := start(t, File{Path: path, Poll: 5 * time.Millisecond})
	select {
	case n := <-r.notices:
		t.Fatalf("notice %+v before the file exists", n)
	case <-time.After(30 * time.Millisecond): // several polls
	}
	if err := os.WriteFile(path, []byte("drill\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := r.notice(t)
	if n.Source != "file" || !n.Deadline.IsZero() || !strings.Contains(n.Detail, path) {
		t.Fatalf("notice %+v, want source file, no deadline, detail naming %s", n, path)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	r.noMoreNotices(t)
}

func TestFileEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "evict")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n := start(t, File{Path: path, Poll: 5 * time.Millisecond}).notice(t)
	if n.Source != "file" || !n.Deadline.IsZero() {
		t.Fatalf("notice %+v, want source file and no deadline", n)
	}
}

func TestFileDeadline(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "evict")
	want := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	tmp := filepath.Join(dir, "evict.tmp")
	if err := os.WriteFile(tmp, []byte(want.Format(time.RFC3339)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := start(t, File{Path: path, Poll: 5 * time.Millisecond})
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	n := r.notice(t)
	if !n.Deadline.Equal(want) {
		t.Fatalf("deadline %v, want %v (notice %+v)", n.Deadline, want, n)
	}
}

func TestFileBadConfig(t *testing.T) {
	r := start(t, File{})
	select {
	case err := <-r.done:
		r.stopped, r.err = true, err
		if !errors.Is(err, ErrBadConfig) {
			t.Fatalf("Watch = %v, want ErrBadConfig", err)
		}
	case <-time.After(wait):
		t.Fatal("Watch with an empty path did not fail")
	}
}
