package data

import (
	"fmt"
	"testing"
)

// TestIDs: ids are numbered in the order they are added, found again
// through the table's growth, and cost little more than their bytes.
func TestIDs(t *testing.T) {
	var d IDs
	const n = 100_000
	for i := range n {
		id := []byte(fmt.Sprintf("A%013d", i*31))
		if got, ok := d.Add(id); !ok || got != uint32(i) {
			t.Fatalf("Add(%s) = %d, %v; want %d", id, got, ok, i)
		}
	}
	for i := range n {
		id := []byte(fmt.Sprintf("A%013d", i*31))
		if got, ok := d.Lookup(id); !ok || got != uint32(i) {
			t.Fatalf("Lookup(%s) = %d, %v; want %d", id, got, ok, i)
		}
		if again, _ := d.Add(id); again != uint32(i) {
			t.Fatalf("Add(%s) again = %d, want %d", id, again, i)
		}
	}
	if _, ok := d.Lookup([]byte("A0000000000001")); ok || d.Len() != n || d.ID(7) != "A0000000000217" {
		t.Errorf("Lookup of an absent id found it, or Len %d, ID(7) %q", d.Len(), d.ID(7))
	}
	d.trim()
	// 14 bytes an id; the table is at most 70% full and at least 35%,
	// its slots 4 bytes, plus 4 bytes of offset: at most 16 bytes over.
	size := cap(d.text) + 4*cap(d.ends) + 4*cap(d.slots)
	if per := float64(size-14*n) / n; per > 16 {
		t.Errorf("%.1f bytes an id beyond its own 14", per)
	}
	var empty IDs
	if _, ok := empty.Lookup([]byte("x")); ok {
		t.Error("an empty dictionary found an id")
	}
}
