package checkpoint

import (
	"errors"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"os"
	"path/filepath"
	"testing"
)

func TestPartStatesRoundTripAndDamage(t *testing.T) {
	dir := t.TempDir()
	want := map[int][]byte{0: []byte("zero"), 7: {}, 300: make([]byte, 70000)}
	f, err := WritePartStates(dir, 4, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadPartStates(dir, f)
	if err != nil || len(got) != 3 || string(got[0]) != "zero" || len(got[7]) != 0 || len(got[300]) != 70000 {
		t.Fatalf("read back %d partitions, %v", len(got), err)
	}
	orig, _ := os.ReadFile(filepath.Join(dir, f.Name))
	damage := map[string]func([]byte) []byte{
		"truncated":  func(b []byte) []byte { return b[:len(b)-10] },
		"bit flip":   func(b []byte) []byte { b[20] ^= 1; return b },
		"extra byte": func(b []byte) []byte { return append(b, 0) },
	}
	for name, fn := range damage {
		b := fn(append([]byte(nil), orig...))
		os.WriteFile(filepath.Join(dir, f.Name), b, 0o644)
		if _, err := ReadPartStates(dir, f); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
		// A file whose record matches it but whose inside is wrong: the
		// trailing checksum catches it.
		g := StateFile{Name: f.Name, Size: int64(len(b)), CRC32: crc32c.Checksum(b)}
		if _, err := ReadPartStates(dir, g); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s, with a record to match: %v, want ErrCorrupt", name, err)
		}
	}
	os.Remove(filepath.Join(dir, f.Name))
	if _, err := ReadPartStates(dir, f); err == nil {
		t.Error("a missing state file was read")
	}
}
