package drill

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestAccount(t *testing.T) {
	workers := []WorkerAudit{
		{Rank: 0, AckedLogged: 10, Finished: true},  // all there
		{Rank: 1, AckedLogged: 7},                   // killed: the table holds 9, two pushes after its last flush
		{Rank: 2, AckedLogged: 5, Finished: true},   // table holds 3: two lost
		{Rank: 3, AckedLogged: 4, Finished: true},   // table holds 6: two applied twice
		{Rank: -1, AckedLogged: 0, Finished: false}, // never got a rank
	}
	a := Account(workers, []float32{10, 9, 3, 6}, []float32{2, 2, 1, 0, 3, 2}, 2)
	want := Accounting{AckedUpdatesLost: 2, AckedUpdatesDuplicated: 2, ExamplesRepeated: 1, ExamplesSkipped: 3, ExamplesAudited: 10, RowsSkipped: 2,
		Off: []RowCount{{2, 1}, {3, 0}, {4, 3}}}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("got %+v, want %+v", a, want)
	}
	if workers[2].Lost != 2 || workers[2].ServerCount != 3 || workers[1].Lost != 0 {
		t.Errorf("per worker: %+v", workers)
	}
}

func TestMaxStall(t *testing.T) {
	if g, _ := MaxStall(); g != 0 {
		t.Errorf("no acks: %v", g)
	}
	if g, _ := MaxStall([]int64{5}); g != 0 {
		t.Errorf("one ack: %v", g)
	}
	// Worker 0 stalls from 30 to 100, but worker 1 acknowledges at 60:
	// the longest silence anywhere is 60..100.
	g, at := MaxStall([]int64{10, 20, 30, 100}, []int64{15, 60, 105})
	if g != 40 || at != 60 {
		t.Errorf("got %v at %d, want 40ns at 60", g, at)
	}
}

func TestAuditLogRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.audit")
	l := NewAuditLog(path, 4)
	t0 := time.Unix(1700000000, 0)
	for i := range 10 {
		if err := l.Record(3, int64(i+1), t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		// What a SIGKILL would leave: the first record at once, then
		// every fourth.
		got, err := ReadAuditLog(path)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(i + 1)
		if want := 1 + (n-1)/4*4; got.Acked != want || got.Complete {
			t.Fatalf("after %d records the file holds %d (complete %v), want %d", n, got.Acked, got.Complete, want)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rank != 3 || got.Acked != 10 || !got.Complete || len(got.Times) != 10 || got.Times[9] != t0.Add(9*time.Millisecond).UnixNano() {
		t.Fatalf("read back %+v", got)
	}
	if err := l.Record(3, 11, t0); err == nil {
		t.Error("record after close succeeded")
	}
}

func TestReadAuditLogTornAndBad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := ReadAuditLog(write("torn", auditHeader+"1\na 1 100\na 2 20"))
	if err != nil || got.Acked != 1 || got.Complete || got.Rank != 1 {
		t.Fatalf("torn tail: %+v, %v", got, err)
	}
	for name, s := range map[string]string{
		"empty":    "",
		"noheader": "a 1 100\n",
		"gap":      auditHeader + "0\na 1 100\na 3 200\n",
		"badend":   auditHeader + "0\na 1 100\nend 2\n",
		"junk":     auditHeader + "0\nhello\n",
	} {
		if _, err := ReadAuditLog(write(name, s)); !errors.Is(err, ErrBadAuditLog) {
			t.Errorf("%s: got %v, want ErrBadAuditLog", name, err)
		}
	}
}
