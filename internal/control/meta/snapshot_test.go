package meta

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSnapshotRecords: a save's partition records go with its blob; a
// rewrite too large for one transaction (more records than etcd takes in
// one, and more bytes) is written in batches, the blob last, and leaves
// only its generation; what a dead leader's rewrite left is not read, and
// is deleted by the next rewrite; a save that is not a rewrite and does
// not fit is refused.
func TestSnapshotRecords(t *testing.T) {
	s := open(t)
	ctx := ctxT(t, 30*time.Second)
	lead, err := s.Campaign(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Resign(ctx)
	rec := func(p, n int) []byte { return bytes.Repeat([]byte{byte('a' + p%26)}, n) }
	want := map[int][]byte{}
	for p := range 300 {
		want[p] = rec(p, 8<<10) // 2.4 MB in all
	}
	if _, err := s.PutSnapshot(ctx, lead, Save{State: []byte(`{"g":1}`), Gen: 1, Parts: want, Rewrite: true}, nil); err != nil {
		t.Fatal(err)
	}
	check := func(what string, gen uint64, want map[int][]byte) {
		t.Helper()
		sv, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sv.Gen != gen || len(sv.Parts) != len(want) {
			t.Fatalf("%s: generation %d with %d records, want %d with %d", what, sv.Gen, len(sv.Parts), gen, len(want))
		}
		for p, b := range want {
			if !bytes.Equal(sv.Parts[p], b) {
				t.Fatalf("%s: partition %d's record is %d bytes, want %d", what, p, len(sv.Parts[p]), len(b))
			}
		}
	}
	check("the rewrite in batches", 1, want)

	// An incremental save: two records changed, one deleted.
	want[5], want[299] = []byte("five"), []byte("last")
	delete(want, 7)
	if _, err := s.PutSnapshot(ctx, lead, Save{State: []byte(`{"g":1}`), Gen: 1,
		Parts: map[int][]byte{5: want[5], 299: want[299], 7: nil}}, nil); err != nil {
		t.Fatal(err)
	}
	check("an incremental save", 1, want)

	// A leader that died in the middle of a rewrite to generation 2.
	for p := range 3 {
		if _, err := s.cli.Put(ctx, s.partKey(2, p+1000), "orphan"); err != nil {
			t.Fatal(err)
		}
	}
	check("with a dead leader's orphans", 1, want)

	small := map[int][]byte{0: []byte("x"), 1: []byte("y"), 2: nil}
	if _, err := s.PutSnapshot(ctx, lead, Save{State: []byte(`{"g":2}`), Gen: 2, Parts: small, Rewrite: true}, nil); err != nil {
		t.Fatal(err)
	}
	delete(small, 2)
	check("the next rewrite", 2, small)
	if n := countKeys(t, s, s.partsKey()); n != 2 {
		t.Fatalf("%d records stored after a rewrite to 2, want 2", n)
	}

	big := map[int][]byte{}
	for p := range maxTxnOps {
		big[p] = []byte("r")
	}
	_, err = s.PutSnapshot(ctx, lead, Save{State: []byte(`{"g":2}`), Gen: 2, Parts: big}, nil)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("an incremental save of %d records: %v, want %v", len(big), err, ErrInvalid)
	}
	check("after a refused save", 2, small)
}

func countKeys(t *testing.T, s *Store, prefix string) int64 {
	t.Helper()
	resp, err := s.cli.Get(ctxT(t, 5*time.Second), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(fmt.Errorf("count %s: %w", prefix, err))
	}
	return resp.Count
}
