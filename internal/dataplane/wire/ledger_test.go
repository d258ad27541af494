package wire

import (
	"bytes"
	"errors"
	"testing"
)

// TestLedgerFrameAndRole: a ledger frame and a ledger connection's hello
// are accepted, the type and role after them are not.
func TestLedgerFrameAndRole(t *testing.T) {
	m := Replicate{Pairs: []Pair{{Client: 9, Seq: 4, Acked: 3, Table: 1, Slots: []uint64{2, 5}}}}
	raw := frameBytes(t, Header{Type: TLedger, Epoch: 7, ReqID: 1}, m.Parts()...)
	r := NewReader(bytes.NewReader(raw), 0)
	h, err := r.Next()
	if err != nil || h.Type != TLedger || h.Type.String() != "ledger" {
		t.Fatalf("ledger frame: %+v %v", h, err)
	}
	p, err := r.Payload(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseReplicate(p)
	if err != nil || len(got.Pairs) != 1 || got.Pairs[0].Seq != 4 || got.Pairs[0].Acked != 3 {
		t.Fatalf("ledger body: %+v %v", got, err)
	}
	raw[3] = byte(TLedger + 1)
	if _, err := NewReader(bytes.NewReader(raw), 0).Next(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("type %d: %v, want corrupt", TLedger+1, err)
	}
	hello := AppendHello(nil, Hello{Worker: NoWorker, Role: RoleLedger, Node: "server-1"})
	if h, err := ParseHello(hello); err != nil || h.Role != RoleLedger {
		t.Fatalf("ledger hello: %+v %v", h, err)
	}
	hello[4] = byte(RoleLedger + 1)
	if _, err := ParseHello(hello); !errors.Is(err, ErrCorrupt) {
		t.Errorf("role %d: %v, want corrupt", RoleLedger+1, err)
	}
}
