package plot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// report builds a train report of n passes and a timeline with a grant,
// a failure and the passes' ends.
func report(t *testing.T, n int) []byte {
	t.Helper()
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	evs := []api.Event{{Seq: 1, Time: t0, Kind: api.EventGrant, Node: "worker-0"}}
	var passes []map[string]float64
	for i := range n {
		passes = append(passes, map[string]float64{"pass": float64(i + 1), "seconds": 0.5, "test_auc": 0.8 + 0.01*float64(i), "train_logloss": 0.5 - 0.01*float64(i)})
		evs = append(evs, api.Event{Seq: uint64(i + 2), Time: t0.Add(time.Duration(i+1) * time.Second), Kind: api.EventPass, Cause: fmt.Sprintf("pass %d trained", i+1)})
	}
	evs = append(evs, api.Event{Seq: 99, Time: t0.Add(1500 * time.Millisecond), Kind: api.EventFailed, Node: "server-1"})
	b, err := json.Marshal(map[string]any{"workers": map[string]any{"0": map[string]any{"passes": passes}}, "events": evs,
		"faults": []map[string]any{{"time_s": 1.4, "action": "kill", "role": "server", "node": "server-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParsePlacesPassesOnTheTimeline(t *testing.T) {
	r, err := Parse(report(t, 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Passes) != 5 || len(r.Events) != 7 || len(r.Faults) != 1 {
		t.Fatalf("parsed %d passes, %d events, %d faults", len(r.Passes), len(r.Events), len(r.Faults))
	}
	// Pass 1 (the coordinator's pass 0) ended 1 s after the first grant.
	for i, p := range r.Passes {
		if want := float64(i + 1); p.Seconds != want {
			t.Errorf("pass %d at %v s, want %v", i+1, p.Seconds, want)
		}
	}
}

func TestDrawSVGAndPNG(t *testing.T) {
	r, err := Parse(report(t, 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	for format, magic := range map[string]string{"svg": "<?xml", "png": "\x89PNG"} {
		var b bytes.Buffer
		if err := r.Draw(&b, format); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if !strings.HasPrefix(b.String(), magic) {
			t.Errorf("%s: starts %q", format, b.String()[:min(8, b.Len())])
		}
	}
	if err := r.Draw(&bytes.Buffer{}, "gif"); err == nil {
		t.Error("drew a gif")
	}
}

func TestParseBadReports(t *testing.T) {
	for name, in := range map[string]string{
		"not json":    "{",
		"empty":       "{}",
		"bad events":  `{"events": 3}`,
		"bad workers": `{"workers": []}`,
	} {
		_, err := Parse([]byte(in), nil)
		if err == nil {
			t.Errorf("%s: no error", name)
		}
		if name == "empty" && !errors.Is(err, ErrNoData) {
			t.Errorf("empty: %v, want ErrNoData", err)
		}
	}
	// A coordinator's --events file given as the report, and its report
	// given as the events: each said only that JSON did not unmarshal.
	timeline := `[{"time": "2026-11-29T03:00:00Z", "kind": "join", "node": "s0"}]`
	if _, err := Parse([]byte(timeline), nil); !errors.Is(err, ErrTimelineAsReport) {
		t.Errorf("a timeline as the report: %v, want ErrTimelineAsReport", err)
	}
	if _, err := Parse([]byte(`{"0": {}}`), []byte(`{"0": {}}`)); !errors.Is(err, ErrBadEvents) {
		t.Errorf("a report as the events: %v, want ErrBadEvents", err)
	}
}

// TestResumedReport: a coordinator's report of a resumed job lists the
// passes before its checkpoint as restored, with no metrics; they are not
// plotted (they drew as zeros), nor is a pass's missing training loss.
func TestResumedReport(t *testing.T) {
	res := []api.PassResult{
		{Pass: 1, Rank: -1, Restored: true},
		{Pass: 2, Rank: -1, Restored: true},
		{Pass: 3, Rank: 0, Seconds: 0.5, Metrics: map[string]float64{"test_auc": 0.9}},
		{Pass: 4, Rank: 1, Seconds: 0.5, Metrics: map[string]float64{"test_auc": 0.91, "train_logloss": 0.3}},
	}
	b, err := json.Marshal(map[string]any{"passes": res})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Passes) != 2 || r.Passes[0].Metrics["pass"] != 3 {
		t.Fatalf("parsed passes %+v, want 3 and 4", r.Passes)
	}
	p, err := r.metricsPlot()
	if err != nil {
		t.Fatal(err)
	}
	if lo := p.Y.Min; lo < 0.29 {
		t.Errorf("the metrics' axis starts at %v: a missing value drew as 0", lo)
	}
}

// TestLossesDrawn: every copy of some slots lost (k servers killed at
// once) and a fallback's lost updates are drawn on rows of their own,
// naming the nodes; the events panel left them out, so a drill's plot
// showed two failures and nothing of the data they took with them.
func TestLossesDrawn(t *testing.T) {
	r, err := Parse(report(t, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	t0 := r.Events[0].Time
	r.Events = append(r.Events,
		api.Event{Seq: 100, Time: t0.Add(1600 * time.Millisecond), Kind: api.EventLost, Node: "server-0,server-1"},
		api.Event{Seq: 101, Time: t0.Add(1700 * time.Millisecond), Kind: api.EventLoss, Node: "server-2"})
	rows := append(slices.Clone(eventRows), "fault")
	pts, labels := r.eventMarks(rows)
	for _, want := range []struct{ kind, node string }{{api.EventLost, "server-0,server-1"}, {api.EventLoss, "server-2"}} {
		i := slices.Index(rows, want.kind)
		if i < 0 {
			t.Errorf("no %q row in the events panel (%v)", want.kind, rows)
			continue
		}
		y := float64(len(rows) - i)
		if !slices.ContainsFunc(pts, func(p plotter.XY) bool { return p.Y == y }) || !slices.Contains(labels, " "+want.node) {
			t.Errorf("the %q event of %s not drawn: points %v, labels %q", want.kind, want.node, pts, labels)
		}
	}
}
