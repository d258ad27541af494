package drill

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestDropEtcdData: a finished run keeps its logs and reports, not its
// coordinators' etcd data (about 65 MB each, left in /tmp by every run).
func TestDropEtcdData(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"etcd/member/wal", "etcd-0/member", "etcd-1", "ckpt/servers"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"coordinator.log", "worker-0.json", "etcd/member/wal/0.wal"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dropEtcdData(dir, slog.Default())
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{"ckpt", "coordinator.log", "worker-0.json"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}
