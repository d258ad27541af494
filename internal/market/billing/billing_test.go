package billing

import (
	"math"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
	"github.com/terrace-ml/terrace/internal/market/trace"
)

var t0 = time.Date(2015, 3, 1, 0, 0, 0, 0, time.UTC)

// series: 0.10 from t0, 0.20 from t0+30m, 0.05 from t0+90m.
func series() *trace.Series {
	return &trace.Series{Points: []trace.Point{
		{At: t0, Price: 0.10}, {At: t0.Add(30 * time.Minute), Price: 0.20}, {At: t0.Add(90 * time.Minute), Price: 0.05},
	}}
}

func TestBid2015(t *testing.T) {
	s := series()
	m := Bid2015{}
	cases := []struct {
		name       string
		start, end time.Duration
		by         market.EndedBy
		spot       bool
		want       float64
	}{
		{"user releases in the first hour: full hour at the start price", 0, 10 * time.Minute, market.ByUser, true, 0.10},
		{"evicted in the first hour: free", 0, 50 * time.Minute, market.ByProvider, true, 0},
		{"user releases after 100 min: hours at the price of each hour's start", 0, 100 * time.Minute, market.ByUser, true, 0.10 + 0.20},
		{"evicted after 100 min: the partial second hour is free", 0, 100 * time.Minute, market.ByProvider, true, 0.10},
		{"hour starting at 40 min pays 0.20, then 0.05", 40 * time.Minute, 160 * time.Minute, market.ByUser, true, 0.20 + 0.05},
		{"exactly one hour, released", 0, time.Hour, market.ByUser, true, 0.10},
		{"on-demand: started hours", 0, 61 * time.Minute, market.ByUser, false, 2 * 0.21},
		{"nothing", 0, 0, market.ByUser, true, 0},
	}
	for _, c := range cases {
		var ss *trace.Series
		if c.spot {
			ss = s
		}
		got := m.Charge(ss, 0.21, t0.Add(c.start), t0.Add(c.end), c.by)
		if math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPerSecond(t *testing.T) {
	s := series()
	cases := []struct {
		name       string
		m          PerSecond
		start, end time.Duration
		by         market.EndedBy
		spot       bool
		want       float64
	}{
		{"10 s is billed as 60 s", GCP, 0, 10 * time.Second, market.ByUser, true, 0.10 / 60},
		{"per second across changes", GCP, 0, 100 * time.Minute, market.ByUser, true, 0.5*0.10 + 1*0.20 + (10.0/60)*0.05},
		{"AWS: interrupted in the first hour is free", AWS, 0, 50 * time.Minute, market.ByProvider, true, 0},
		{"AWS: released in the first hour is charged", AWS, 0, 30 * time.Minute, market.ByUser, true, 0.05},
		{"AWS: interrupted later: seconds used", AWS, 0, 100 * time.Minute, market.ByProvider, true, 0.5*0.10 + 1*0.20 + (10.0/60)*0.05},
		{"GCP: interrupted early is charged", GCP, 0, 30 * time.Minute, market.ByProvider, true, 0.05},
		{"on-demand per second", AWS, 0, 30 * time.Minute, market.ByUser, false, 0.5 * 0.21},
		{"on-demand minimum", AWS, 0, time.Second, market.ByUser, false, 0.21 / 60},
	}
	for _, c := range cases {
		var ss *trace.Series
		if c.spot {
			ss = s
		}
		got := c.m.Charge(ss, 0.21, t0.Add(c.start), t0.Add(c.end), c.by)
		if math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestFree: what each model leaves uncharged of a transient machine's
// life: the interrupted partial hour (2015), the whole life of a machine
// EC2 interrupts within its first hour (AWS today), nothing on GCP or
// when the user ends the machine.
func TestFree(t *testing.T) {
	cases := []struct {
		name string
		m    Model
		life time.Duration
		by   market.EndedBy
		want time.Duration
	}{
		{"2015: evicted at 100 min", Bid2015{}, 100 * time.Minute, market.ByProvider, 40 * time.Minute},
		{"2015: evicted at 50 min", Bid2015{}, 50 * time.Minute, market.ByProvider, 50 * time.Minute},
		{"2015: released at 50 min", Bid2015{}, 50 * time.Minute, market.ByUser, 0},
		{"2015: evicted on the hour", Bid2015{}, 2 * time.Hour, market.ByProvider, 0},
		{"AWS: interrupted at 50 min", AWS, 50 * time.Minute, market.ByProvider, 50 * time.Minute},
		{"AWS: interrupted at 100 min", AWS, 100 * time.Minute, market.ByProvider, 0},
		{"AWS: released at 50 min", AWS, 50 * time.Minute, market.ByUser, 0},
		{"GCP: preempted at 50 min", GCP, 50 * time.Minute, market.ByProvider, 0},
	}
	s := series()
	for _, c := range cases {
		if got := c.m.Free(t0, t0.Add(c.life), c.by); got != c.want {
			t.Errorf("%s: %v free, want %v", c.name, got, c.want)
		}
		// Free time is exactly the time the charge leaves out.
		if c.want > 0 && c.m.Charge(s, 0.21, t0, t0.Add(c.life), c.by) != c.m.Charge(s, 0.21, t0, t0.Add(c.life-c.want), market.ByProvider) {
			t.Errorf("%s: the charge does not leave out the free time", c.name)
		}
	}
}

// TestMaxPrice: a 2015 machine is evicted above its bid; an EC2 machine
// today above its maximum price, the on-demand price unless given; a GCP
// machine never by price.
func TestMaxPrice(t *testing.T) {
	if got := (Bid2015{}).MaxPrice(0.05, 0.21); got != 0.05 {
		t.Errorf("2015: %v, want the bid", got)
	}
	if got := AWS.MaxPrice(0, 0.21); got != 0.21 {
		t.Errorf("AWS: %v, want the on-demand price", got)
	}
	if got := AWS.MaxPrice(0.1, 0.21); got != 0.1 {
		t.Errorf("AWS with a maximum: %v, want it", got)
	}
	if got := GCP.MaxPrice(0, 0.21); !math.IsInf(got, 1) {
		t.Errorf("GCP: %v, want none", got)
	}
}

func TestByName(t *testing.T) {
	if m, err := ByName("persecond", "gcp"); err != nil || m.Notice() != 30*time.Second {
		t.Errorf("gcp: %v %v", m, err)
	}
	if m, err := ByName("bid2015", ""); err != nil || m.Notice() != 2*time.Minute || !m.BidEvicts() {
		t.Errorf("bid2015: %v %v", m, err)
	}
	for _, bad := range [][2]string{{"auction", ""}, {"persecond", "azure"}} {
		if _, err := ByName(bad[0], bad[1]); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
