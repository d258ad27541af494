package server

import (
	"testing"

	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
)

// TestCheckOwned: a lone server owns every key (checkOwned takes a short
// cut there), a server not in the ring owns none, and of two servers each
// owns only its own slots.
func TestCheckOwned(t *testing.T) {
	keys := keyspace.KeyList([]uint64{1, 64, 1 << 20, 1<<40 + 3, 1<<63 + 5})
	one, err := ring.New(1, []ring.Server{{ID: "a"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkOwned(one, 0, keys); err != nil {
		t.Errorf("lone server: %v", err)
	}
	if err := checkOwned(one, -1, keys); err == nil {
		t.Error("a server not in the ring owns keys")
	}
	two, err := ring.New(1, []ring.Server{{ID: "a"}, {ID: "b"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys.List() {
		ks := keyspace.KeyList([]uint64{k})
		o := two.Owner(k)
		if err := checkOwned(two, o, ks); err != nil {
			t.Errorf("key %d, its owner %d: %v", k, o, err)
		}
		if err := checkOwned(two, 1-o, ks); err == nil {
			t.Errorf("key %d owned by %d and %d", k, o, 1-o)
		}
	}
}
