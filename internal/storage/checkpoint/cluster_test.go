package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
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
