package ps

import (
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

// TestPlanCacheKeepsListsFromTheirSecondUse: a key list seen once gets a
// one-off plan and nothing is kept (no copy of the list); the second use
// keeps a plan with its own copy of the keys and registers the list with
// the servers; the third reuses it; a caller that then rewrites its slice
// changes nothing kept. A range's plan is kept from its first use.
func TestPlanCacheKeepsListsFromTheirSecondUse(t *testing.T) {
	rm, err := ring.New(1, []ring.Server{{ID: "a"}, {ID: "b"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tb := &Table{c: &Client{}, spec: table.Spec{Width: 1}}
	keys := []uint64{3, 70, 5000, 1 << 20, 1<<20 + 1}
	list := func() *op { return &op{keys: keys} }

	first := tb.plans.get(tb, rm, list())
	if len(tb.plans.byKey) != 0 || first.reuse.Load() {
		t.Fatalf("first use: %d plans kept, reuse %v", len(tb.plans.byKey), first.reuse.Load())
	}
	second := tb.plans.get(tb, rm, list())
	if len(tb.plans.byKey) != 1 || !second.reuse.Load() {
		t.Fatalf("second use: %d plans kept, reuse %v", len(tb.plans.byKey), second.reuse.Load())
	}
	if third := tb.plans.get(tb, rm, list()); third != second {
		t.Fatal("third use built a new plan")
	}
	want := slices.Clone(keys)
	keys[0] = 4
	if !slices.Equal(second.keys, want) {
		t.Fatalf("kept plan's keys %v changed with the caller's slice", second.keys)
	}
	var got []uint64
	for _, p := range second.parts {
		got = append(got, p.keys...)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("parts' keys %v, want %v", got, want)
	}

	rng := &op{isRange: true, rng: keyspace.Range{Lo: 0, Hi: 100_000}}
	if pl := tb.plans.get(tb, rm, rng); len(tb.plans.byKey) != 2 || pl.reuse.Load() {
		t.Fatalf("range's first use: %d plans kept, reuse %v", len(tb.plans.byKey), pl.reuse.Load())
	}
}
