package replay

import (
	"slices"
	"testing"
	"time"
)

// TestPlotLeavesOutNone: the bid's and the stage's panels leave out a
// policy whose value is 0 throughout; the other panels draw every policy.
// On-demand's bid and the untiered policies' stage were drawn as lines at
// 0 (replay --policy all --plot).
func TestPlotLeavesOutNone(t *testing.T) {
	t0 := time.Date(2015, 4, 1, 0, 0, 0, 0, time.UTC)
	rep := &Report{Timelines: map[string][]Sample{
		"ondemand":   {{At: t0, Reliable: 32}, {At: t0.Add(time.Hour), Reliable: 32}},
		"checkpoint": {{At: t0, Transient: 32, MeanBid: 0.21}, {At: t0.Add(time.Hour), Transient: 32, MeanBid: 0.21}},
		"tiers":      {{At: t0, Transient: 30, Reliable: 2, MeanBid: 0.21, Stage: 1}, {At: t0.Add(time.Hour), Stage: 2}},
	}}
	names := []string{"ondemand", "checkpoint", "tiers"}
	bid := func(s Sample) float64 { return s.MeanBid }
	stage := func(s Sample) float64 { return float64(s.Stage) }
	reliable := func(s Sample) float64 { return float64(s.Reliable) }
	for _, tc := range []struct {
		panel string
		got   []string
		want  []string
	}{
		{"bid", drawn(rep, names, bid, true), []string{"checkpoint", "tiers"}},
		{"stage", drawn(rep, names, stage, true), []string{"tiers"}},
		{"reliable machines", drawn(rep, names, reliable, false), names},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("the %s panel draws %v, want %v", tc.panel, tc.got, tc.want)
		}
	}
}
