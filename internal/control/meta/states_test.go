package meta

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// TestPartStates stores a blob larger than one etcd request in chunks,
// replaces a version, refuses a deposed leader, detects a damaged chunk and
// sweeps every version but the current ones.
func TestPartStates(t *testing.T) {
	s := open(t)
	ctx := ctxT(t, 20*time.Second)
	lead, err := s.Campaign(ctx, "coord-a")
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2*StateChunk+1234)
	for i := range big {
		big[i] = byte(rand.N(256))
	}
	for ver, blob := range map[uint64][]byte{1: big, 2: {}, 3: []byte("v3")} {
		if err := s.PutPartState(ctx, lead, 7, ver, blob); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.PartState(ctx, 7, 1); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("3-chunk state: %d bytes, %v; want %d", len(got), err, len(big))
	}
	if got, err := s.PartState(ctx, 7, 2); err != nil || len(got) != 0 {
		t.Fatalf("empty state: %q, %v", got, err)
	}
	// Written again, smaller: the old chunks go.
	if err := s.PutPartState(ctx, lead, 7, 1, []byte("small")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.PartState(ctx, 7, 1); err != nil || string(got) != "small" {
		t.Fatalf("rewritten state: %d bytes, %v", len(got), err)
	}
	if _, err := s.PartState(ctx, 7, 9); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing version: %v, want ErrNotFound", err)
	}
	// A chunk changed behind the header's back.
	if err := s.PutPartState(ctx, lead, 8, 4, big); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Put(ctx, s.pstateVerKey(8, 4)+"c1", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PartState(ctx, 8, 4); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged chunk: %v, want ErrCorrupt", err)
	}
	// A version without its header (its writer died before the last
	// request) does not exist, and the sweep removes it with the others.
	if _, err := s.cli.Put(ctx, s.pstateVerKey(8, 5)+"c0", "partial"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PartState(ctx, 8, 5); !errors.Is(err, ErrNotFound) {
		t.Fatalf("headerless version: %v, want ErrNotFound", err)
	}
	n, err := s.SweepPartStates(ctx, lead, func(p int, ver uint64) bool { return p == 7 && ver == 3 || p == 8 && ver == 4 })
	if err != nil || n != 3 {
		t.Fatalf("sweep removed %d versions (%v), want 3 (7/1, 7/2, 8/5)", n, err)
	}
	if got, err := s.PartState(ctx, 7, 3); err != nil || string(got) != "v3" {
		t.Fatalf("kept version after sweep: %q, %v", got, err)
	}
	if _, err := s.PartState(ctx, 7, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("swept version: %v, want ErrNotFound", err)
	}
	// A deposed leader writes nothing.
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPartState(ctx, lead, 7, 10, []byte("late")); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("write after resigning: %v, want ErrNotLeader", err)
	}
	if _, err := s.PartState(ctx, 7, 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused write left a version: %v", err)
	}
}
