package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/terrace-ml/terrace/table"
)

func TestCommitRecords(t *testing.T) {
	dir := t.TempDir()
	if _, _, _, err := LatestCommit(dir, nil); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("empty dir: %v", err)
	}
	for seq, meta := range map[uint64]string{1: `{"epoch":1}`, 2: `{"epoch":3}`} {
		if err := CommitCluster(dir, seq, []byte(meta)); err != nil {
			t.Fatal(err)
		}
	}
	seq, meta, _, err := LatestCommit(dir, nil)
	if err != nil || seq != 2 || string(meta) != `{"epoch":3}` {
		t.Fatalf("latest %d %s %v", seq, meta, err)
	}
	// A torn newer record is passed over, with the reason.
	p := filepath.Join(dir, commitName(2))
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)-2], 0o644)
	seq, meta, skipped, err := LatestCommit(dir, nil)
	if err != nil || seq != 1 || string(meta) != `{"epoch":1}` || len(skipped) != 1 || !errors.Is(skipped[0], ErrCorrupt) {
		t.Fatalf("after tearing 2: %d %s %v %v", seq, meta, skipped, err)
	}
}

// TestPruneCluster: records 1, 2, 4 and 5 committed, 3 abandoned after
// its parts were written, 6 being written (parts, no record). Keeping two
// removes everything of 1-3 and nothing of 4-6; a damaged newest record
// does not count towards the kept; every kept checkpoint still opens.
func TestPruneCluster(t *testing.T) {
	dir := t.TempDir()
	part := func(id string, seq uint64) {
		w, err := Create(ServerDir(dir, id), seq)
		if err != nil {
			t.Fatal(err)
		}
		_, err = w.WriteTable(t.Context(), "t1", table.Spec{Name: "w", Width: 1}, func(fn func(uint64, []float32, [][]float32) bool) {
			fn(seq, []float32{1}, nil)
		})
		if err == nil {
			_, err = w.Commit(Meta{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for seq := uint64(1); seq <= 6; seq++ {
		part("s0", seq)
		part("s1", seq)
		if seq == 3 || seq == 6 {
			continue
		}
		if _, err := WritePartStates(dir, seq, map[int][]byte{0: []byte("state")}); err != nil {
			t.Fatal(err)
		}
		if err := CommitCluster(dir, seq, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	left := func() string {
		t.Helper()
		c, _ := numbered(dir, commitPrefix)
		st, _ := numbered(dir, "partstate-")
		s0, _ := list(ServerDir(dir, "s0"))
		s1, _ := list(ServerDir(dir, "s1"))
		return fmt.Sprint(c, st, s0, s1)
	}
	if _, err := PruneCluster(dir, 0); err == nil {
		t.Fatal("keep 0 accepted")
	}
	removed, err := PruneCluster(dir, 2)
	if err != nil || fmt.Sprint(removed) != "[1 2]" {
		t.Fatalf("removed %v, %v; want [1 2]", removed, err)
	}
	if got, want := left(), "[4 5] [4 5] [4 5 6] [4 5 6]"; got != want {
		t.Fatalf("left %s; want %s", got, want)
	}
	if err := CheckServers(t.Context(), dir, 4, []string{"s0", "s1"}); err != nil {
		t.Fatalf("kept checkpoint 4: %v", err)
	}
	if removed, err := PruneCluster(dir, 2); err != nil || len(removed) != 0 {
		t.Fatalf("again: removed %v, %v; want nothing", removed, err)
	}
	// A torn record 5: 4 is the newest intact, and nothing older is left
	// to fall back on with keep 2, so nothing goes.
	p := filepath.Join(dir, commitName(5))
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)-1], 0o644)
	if removed, err := PruneCluster(dir, 2); err != nil || len(removed) != 0 {
		t.Fatalf("5 torn, keep 2: removed %v, %v; want nothing", removed, err)
	}
	if removed, err := PruneCluster(dir, 1); err != nil || len(removed) != 0 || left() != "[4 5] [4 5] [4 5 6] [4 5 6]" {
		t.Fatalf("5 torn, keep 1: removed %v, %v, left %s; want 4 and 5 kept", removed, err, left())
	}
}

// TestNextClusterSeq: the next cluster checkpoint is numbered past every
// number in use, a server's torn part and a damaged record included.
func TestNextClusterSeq(t *testing.T) {
	dir := t.TempDir()
	if n, err := NextClusterSeq(dir); err != nil || n != 1 {
		t.Fatalf("empty: %d, %v; want 1", n, err)
	}
	for _, p := range []string{"commit-0000000003", "partstate-0000000004", ".commit-0000000009.tmp"} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(ServerDir(dir, "s0"), "ckpt-0000000005"), 0o755); err != nil {
		t.Fatal(err)
	}
	if n, err := NextClusterSeq(dir); err != nil || n != 6 {
		t.Fatalf("%d, %v; want 6, past server s0's torn part 5", n, err)
	}
}
