package trace

import (
	"os"
	"testing"
)

func seed(f *testing.F, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

// The fuzz targets check that no input makes a reader panic, and that
// whatever a reader accepts is sorted and sane.

func FuzzPricesCSV(f *testing.F) {
	seed(f, "testdata/prices.csv")
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePricesCSV("f", b, "")
		if err == nil {
			checkPrices(t, p)
		}
	})
}

func FuzzPricesJSON(f *testing.F) {
	seed(f, "testdata/prices.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePricesJSON("f", b, "")
		if err == nil {
			checkPrices(t, p)
		}
	})
}

func FuzzBamboo(f *testing.F) {
	seed(f, "testdata/g4dn-trace.csv")
	f.Fuzz(func(t *testing.T, b []byte) {
		if a, err := ParseBamboo("f", b); err == nil {
			checkAvailability(t, a)
		}
	})
}

func FuzzCounts(f *testing.F) {
	seed(f, "testdata/a100x1-east1b.txt")
	f.Fuzz(func(t *testing.T, b []byte) {
		if a, err := ParseCounts("f", b); err == nil {
			checkAvailability(t, a)
		}
	})
}

func FuzzSkyPilot(f *testing.F) {
	seed(f, "testdata/sky.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		if a, err := ParseSkyPilot("f", b); err == nil {
			checkAvailability(t, a)
		}
	})
}

func FuzzOnDemand(f *testing.F) {
	f.Add("c3.xlarge=0.21,r3.large=0.175")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseOnDemand(s)
		for typ, p := range m {
			if err == nil && (typ == "" || !(p > 0)) {
				t.Fatalf("accepted %q=%v", typ, p)
			}
		}
	})
}

func checkPrices(t *testing.T, p *Prices) {
	if len(p.Series) == 0 {
		t.Fatal("accepted an empty trace")
	}
	for _, s := range p.Series {
		for i, pt := range s.Points {
			if !(pt.Price >= 0) || (i > 0 && pt.At.Before(s.Points[i-1].At)) {
				t.Fatalf("%s point %d: %+v", s.Market, i, pt)
			}
		}
	}
}

func checkAvailability(t *testing.T, a *Availability) {
	if len(a.Offsets) == 0 || len(a.Offsets) != len(a.Counts) {
		t.Fatalf("accepted %+v", a)
	}
	for i, c := range a.Counts {
		if c < 0 || c > a.Size || (i > 0 && a.Offsets[i] < a.Offsets[i-1]) {
			t.Fatalf("point %d: %v at %v (size %d)", i, c, a.Offsets[i], a.Size)
		}
	}
}
