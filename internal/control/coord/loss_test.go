package coord

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/keyspace"
)

// saveAndRestore saves m's state as the leader does and returns the
// machine of a standby that takes over from it.
func saveAndRestore(t *testing.T, cfg Config, m *Machine, now time.Time) *Machine {
	t.Helper()
	rd, ok := m.Ready()
	if !ok || rd.Save == nil {
		t.Fatal("nothing to save")
	}
	if err := m.Advance(0); err != nil {
		t.Fatal(err)
	}
	var saved Saved
	saved.Apply(rd.Save)
	m2, err := RestoreMachine(cfg, saved, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	return m2
}

func pushes(client uint64, seqs ...uint64) []api.PushRuns {
	var out []api.LostPush
	for _, s := range seqs {
		out = append(out, api.LostPush{Client: client, Seq: s, Worker: int(client)})
	}
	return api.Runs(out)
}

// TestLossCountedOnceAcrossFailover: a push whose keys fell in the slots
// of two BackupPS is in both their reports of a fallback; when a new
// leader takes over between the two, it must still count the push once
// (docs/design/tiers.md, "What the ledger counts exactly").
func TestLossCountedOnceAcrossFailover(t *testing.T) {
	cfg := Config{Servers: 2, Workers: 2, Partitions: 2}
	now := time.Unix(1000, 0)
	m := NewMachine(cfg, now)
	m.ReportLoss(1, api.LossReport{From: "b0", Epoch: 9, Lost: pushes(1, 1, 2), Allowed: pushes(1, 1, 2, 3)})
	m = saveAndRestore(t, cfg, m, now)
	// b1's report repeats (1,2) and (1,3), and adds (2,1).
	m.ReportLoss(2, api.LossReport{From: "b1", Epoch: 9, Lost: append(pushes(1, 2), pushes(2, 1)...),
		Allowed: append(pushes(1, 2, 3), pushes(2, 1)...)})
	l := m.Loss()
	if l.UpdatesLost != 3 || l.UpdatesLostBound != 4 {
		t.Errorf("lost %d of %d at risk, want 3 of 4", l.UpdatesLost, l.UpdatesLostBound)
	}
	if n := l.ByWorker["table 0"][1]; n != 2 {
		t.Errorf("worker 1 lost %d, want 2 (by worker %v)", n, l.ByWorker)
	}
	if l.Reports != 2 {
		t.Errorf("%d reports, want 2", l.Reports)
	}
}

// TestLossSeenIsBounded: the saved record of pushes counted keeps only
// the last fallbacks', so the state does not grow with the job, and keeps
// a client's consecutive pushes as one run.
func TestLossSeenIsBounded(t *testing.T) {
	cfg := Config{Servers: 2, Workers: 2, Partitions: 2}
	now := time.Unix(1000, 0)
	m := NewMachine(cfg, now)
	for e := range uint64(3 * lossSeenFallbacks) {
		var lost []uint64
		for s := range uint64(500) {
			lost = append(lost, 1000*e+s)
		}
		m.ReportLoss(e+1, api.LossReport{From: "b0", Epoch: 10 + e, Lost: pushes(1, lost...), Allowed: pushes(1, lost...)})
	}
	if n := len(m.st.LossSeen); n != lossSeenFallbacks {
		t.Fatalf("%d fallbacks remembered, want %d", n, lossSeenFallbacks)
	}
	for _, f := range m.st.LossSeen {
		if len(f.Lost) != 1 || len(f.Lost[0].Seqs) != 2 {
			t.Errorf("fallback %d: lost %v, want one run", f.Epoch, f.Lost)
		}
	}
	if l := m.Loss(); l.UpdatesLost != int64(3*lossSeenFallbacks*500) {
		t.Errorf("lost %d, want %d", l.UpdatesLost, 3*lossSeenFallbacks*500)
	}
}

// TestLargeLossReportOverHTTP: a fallback's report of one sync interval
// of a fast job (here 200,000 pushes of eight workers) reaches the
// coordinator and is counted. As a list of single pushes such a report of
// 10,000 was over the route's 1 MiB limit: refused as "unexpected EOF",
// logged by the BackupPS and never counted, so the drill found every
// lost push uncounted (TestTierRevocationDrill on a fast host). A report
// over the limit is refused naming the limit, and runs that are not runs
// are refused.
func TestLargeLossReportOverHTTP(t *testing.T) {
	c := New(Options{Servers: 1, Workers: 2, Partitions: 2})
	cl := serve(t, c)
	var all []api.LostPush
	for w := range uint64(8) {
		for s := range uint64(25000) {
			if s%1000 == 999 {
				continue // re-sent after the fallback: not lost
			}
			all = append(all, api.LostPush{Client: 100 + w, Seq: 7 + s, Worker: int(w)})
		}
	}
	r := api.LossReport{From: "b0", Epoch: 3, Lost: api.Runs(all), Allowed: api.Runs(all)}
	if err := cl.ReportLoss(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	l := c.StageStatus().Loss
	if want := int64(len(all)); l.UpdatesLost != want || l.UpdatesLostBound != want || l.ByWorker["table 0"][3] != want/8 {
		t.Errorf("counted %d lost of %d allowed (worker 3: %d), want %d", l.UpdatesLost, l.UpdatesLostBound, l.ByWorker["table 0"][3], want)
	}
	// The same report again (a retry) counts nothing twice.
	if err := cl.ReportLoss(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if l2 := c.StageStatus().Loss; l2.UpdatesLost != l.UpdatesLost {
		t.Errorf("a repeated report moved the count from %d to %d", l.UpdatesLost, l2.UpdatesLost)
	}

	bad := api.LossReport{From: "b1", Epoch: 3, Lost: []api.PushRuns{{Client: 1, Seqs: keyspace.SlotSet{5, 3}}}}
	if err := cl.ReportLoss(t.Context(), bad); !errors.Is(err, api.ErrBadRequest) || !strings.Contains(err.Error(), "not sorted") {
		t.Errorf("runs [5, 3): %v, want a bad request naming them", err)
	}
	var huge []api.PushRuns
	for i := range uint64(api.MaxLossBytes / 40) {
		huge = append(huge, api.PushRuns{Client: i, Seqs: keyspace.SlotSet{1, 2}})
	}
	err := cl.ReportLoss(t.Context(), api.LossReport{From: "b1", Epoch: 3, Lost: huge})
	if !errors.Is(err, api.ErrBadRequest) || !strings.Contains(err.Error(), "body over") {
		t.Errorf("a report over %d bytes: %v, want a bad request naming the limit", api.MaxLossBytes, err)
	}
}
