package plot

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestDrawsMachinesStageAndDollars: a report with the coordinator's
// samples gets a panel of machines by class and the stage, and one of the
// dollars when the samples carry them; a report without dollars has no
// cost panel.
func TestDrawsMachinesStageAndDollars(t *testing.T) {
	var rep map[string]any
	if err := json.Unmarshal(report(t, 3), &rep); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var hist []api.Sample
	for i := range 4 {
		d := 0.01 * float64(i)
		hist = append(hist, api.Sample{Time: t0.Add(time.Duration(i) * time.Second), Stage: 2,
			Machines: api.MachineCount{Reliable: 1, Transient: 2 - i/3}, Dollars: &d})
	}
	for _, priced := range []bool{true, false} {
		if !priced {
			for i := range hist {
				hist[i].Dollars = nil
			}
		}
		rep["history"] = hist
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Parse(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.History) != 4 || r.History[3].Machines.Transient != 1 {
			t.Fatalf("parsed history %+v", r.History)
		}
		var svg bytes.Buffer
		if err := r.Draw(&svg, "svg"); err != nil {
			t.Fatal(err)
		}
		for title, want := range map[string]bool{"Machines by class": true, "transient machines": true, "Cost so far": priced} {
			if got := strings.Contains(svg.String(), title); got != want {
				t.Errorf("priced %v: %q drawn: %v, want %v", priced, title, got, want)
			}
		}
	}
	if _, err := Parse([]byte(`{"history": 3}`), nil); err == nil {
		t.Error("a bad history parsed")
	}
}

// TestParseJobPasses: the job's evaluations, made by whichever worker,
// are the curve, nested (the coordinator's report) or flat (terrace
// train's), rather than one worker's share of them.
func TestParseJobPasses(t *testing.T) {
	for name, passes := range map[string]string{
		"nested": `[{"pass": 1, "rank": 2, "seconds": 0.5, "metrics": {"test_auc": 0.8}}, {"pass": 2, "rank": 0, "seconds": 0.5, "metrics": {"test_auc": 0.9}}]`,
		"flat":   `[{"pass": 1, "rank": 2, "seconds": 0.5, "test_auc": 0.8}, {"pass": 2, "rank": 0, "seconds": 0.5, "test_auc": 0.9}]`,
	} {
		r, err := Parse([]byte(`{"passes": `+passes+`, "workers": {"0": {"passes": [{"pass": 2, "seconds": 1, "test_auc": 0.9}]}}}`), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(r.Passes) != 2 || r.Passes[0].Metrics["test_auc"] != 0.8 || r.Passes[1].Metrics["pass"] != 2 || r.Passes[1].Seconds != 1 {
			t.Errorf("%s: passes %+v", name, r.Passes)
		}
	}
}
