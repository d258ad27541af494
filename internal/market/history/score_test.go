package history

import (
	"fmt"
	"math"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market/trace"
)

// TestScoreTrace scores the bid estimator on a recorded price trace with
// a proper score: the log loss of its P(gone within the hour) (the
// notice run out before the hour ends, as BidBrain reads it) at bids of
// 1, 1.1 and 1.5 times the price, against what the trace did next, each
// prediction from the past only. It runs only when TERRACE_SCORE_PRICES
// names a trace (docs/design/market.md, "Time since the move"):
//
//	TERRACE_SCORE_PRICES=/work/shared/data/spot/aws_spot_us-east-1_2015-03_to_2015-08.csv.gz \
//	  go test -count=1 -run TestScoreTrace -v ./internal/market/history
//
// Two sets of predictions on each half of the trace's usable range (A,
// where changes are decided; B, held out): every 37 minutes in every
// market (a period prime to the estimator's step), and at every price
// move of a market, the instant BidBrain decides at. Each is scored with
// the estimator as it was (one "just moved" step) and as it is (the time
// since the move on a log scale).
func TestScoreTrace(t *testing.T) {
	path := os.Getenv("TERRACE_SCORE_PRICES")
	if path == "" {
		t.Skip("TERRACE_SCORE_PRICES not set")
	}
	prices, err := trace.ReadPrices(path, "")
	if err != nil {
		t.Fatal(err)
	}
	const h = time.Hour
	notice := 2 * time.Minute
	first := prices.Series[0].Points[0].At
	end := prices.Series[0].Points[0].At
	for _, s := range prices.Series {
		first = minTime(first, s.Points[0].At)
		end = maxTime(end, s.Points[len(s.Points)-1].At)
	}
	// The replays' usable range: from 14 days in (their warm-up) to the
	// end, split where the previous sessions split it.
	a0 := time.Date(2015, 3, 25, 10, 34, 42, 0, time.UTC)
	b0 := a0.Add(1921 * time.Hour)
	halves := []struct {
		name     string
		from, to time.Time
	}{{"A", a0, b0}, {"B", b0, end.Add(-h)}}
	variants := estimators(h)
	ratios := []float64{1, 1.1, 1.5}
	for _, half := range halves {
		for _, kind := range []string{"grid", "moves"} {
			for _, vr := range variants {
				var loss [3]float64
				var pred, seen [3]float64
				n := 0
				for _, s := range prices.Series {
					src := &Source{Prices: &trace.Prices{Series: []*trace.Series{s}}}
					e := vr.make()
					for _, at := range instants(s.Points, kind, half.from, half.to) {
						v := src.Cut(at)
						m := &v.Markets[0]
						p0, ok := m.Price()
						if !ok || p0 <= 0 {
							continue
						}
						rs := make([]Risk, len(ratios))
						for j, r := range ratios {
							rs[j] = e.BidRisk(v, m, r)
						}
						if rs[0].Samples < 12*24 {
							continue
						}
						n++
						for j, r := range ratios {
							p := min(max(rs[j].Before(h-notice), 1e-4), 1-1e-4)
							y := exceeds(s.Points, at, at.Add(h-notice), r*p0)
							pred[j] += p
							if y {
								seen[j]++
								loss[j] -= math.Log(p)
							} else {
								loss[j] -= math.Log(1 - p)
							}
						}
					}
				}
				out := fmt.Sprintf("half %s %-5s %-22s n=%6d", half.name, kind, vr.name, n)
				for j, r := range ratios {
					out += fmt.Sprintf("  %gx: loss %.3f (pred %.3f seen %.3f)", r, loss[j]/float64(n), pred[j]/float64(n), seen[j]/float64(n))
				}
				t.Log(out)
			}
		}
	}
}

// instants lists the prediction times in [from, to): every 37 minutes
// (grid), or at each change of the price (moves).
func instants(pts []trace.Point, kind string, from, to time.Time) []time.Time {
	var out []time.Time
	if kind == "grid" {
		for at := from; at.Before(to); at = at.Add(37 * time.Minute) {
			out = append(out, at)
		}
		return out
	}
	i := sort.Search(len(pts), func(i int) bool { return !pts[i].At.Before(from) })
	for ; i < len(pts) && pts[i].At.Before(to); i++ {
		if i > 0 && pts[i].Price != pts[i-1].Price {
			out = append(out, pts[i].At)
		}
	}
	return out
}

// exceeds says whether the price of pts rises above bid in (from, to).
func exceeds(pts []trace.Point, from, to time.Time, bid float64) bool {
	i := sort.Search(len(pts), func(i int) bool { return pts[i].At.After(from) })
	for ; i < len(pts) && pts[i].At.Before(to); i++ {
		if pts[i].Price > bid {
			return true
		}
	}
	return false
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// estimators are the shipped estimator (first) and the candidates scored
// against it (docs/design/market.md, "Time since the move").
func estimators(h time.Duration) []struct {
	name string
	make func() *Estimator
} {
	return []struct {
		name string
		make func() *Estimator
	}{
		{"one step", func() *Estimator { return NewEstimator(h) }},
		{"log age", func() *Estimator { e := NewEstimator(h); e.ages = ageEdges(h); return e }},
		{"log age, levels first", func() *Estimator { e := NewEstimator(h); e.ages, e.levelsFirst = ageEdges(h), true; return e }},
		{"one step, levels first", func() *Estimator { e := NewEstimator(h); e.levelsFirst = true; return e }},
		{"log age, shrunk", func() *Estimator {
			e := NewEstimator(h)
			e.ages, e.levelsFirst, e.shrink = ageEdges(h), true, true
			return e
		}},
		{"one step, shrunk", func() *Estimator { e := NewEstimator(h); e.levelsFirst, e.shrink = true, true; return e }},
	}
}
