package replay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/billing"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/jobsim"
	"github.com/terrace-ml/terrace/internal/market/policy"
	"github.com/terrace-ml/terrace/internal/market/rm"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

type spy struct {
	rm.Policy
	acq map[string]int
}

func (s *spy) Decide(st rm.State) rm.Plan {
	p := s.Policy.Decide(st)
	for _, r := range p.Acquire {
		if r.Class == market.Transient {
			m, _ := st.View.Lookup(r.Market)
			pr, _ := m.Price()
			s.acq[fmt.Sprintf("%s x%.2f", r.Market, r.Bid/pr)] += r.Count
		}
	}
	return p
}

func TestDebug(t *testing.T) {
	p, err := trace.ReadPrices("/work/shared/data/spot/aws_spot_us-east-1_2015-03_to_2015-08.csv.gz", "")
	if err != nil {
		t.Fatal(err)
	}
	cal := jobsim.DefaultCalibration()
	cfg := Config{Prices: p, Model: billing.Bid2015{}, Cal: cal, Updates: 4e7, Estimator: history.NewEstimator(time.Hour, 2*time.Minute)}
	first, _ := p.Span()
	for _, d := range []int{14, 40, 90} {
		start := first.Add(time.Duration(d) * 24 * time.Hour)
		pol, _ := policy.New("bidbrain", cfg.policyConfig())
		sp := &spy{Policy: pol, acq: map[string]int{}}
		job := jobsim.New(cal, jobsim.Tiered, 0, 4e7, start)
		r := &run{ctx: context.Background(), cfg: cfg, name: "bidbrain", start: start, job: job}
		_ = r
		res, err := runWith(context.Background(), cfg, sp, start)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("start %s: $%.2f %.1fh ev %d acq %d\n", start.Format("01-02"), res.Dollars, res.Hours, res.Evictions, res.Acquisitions)
		for k, v := range sp.acq {
			fmt.Printf("   %s: %d\n", k, v)
		}
	}
}
