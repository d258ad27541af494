package trace

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
)

const sharedSpot = "../../../../shared/data/spot"

func TestReadPricesCSV(t *testing.T) {
	p, err := ReadPrices("testdata/prices.csv", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Series) != 3 {
		t.Fatalf("%d markets, want 3", len(p.Series))
	}
	s, ok := p.Lookup(market.Market{Zone: "us-east-1a", Type: "c3.xlarge"})
	if !ok || len(s.Points) != 2 || s.OnDemand != 0.21 {
		t.Fatalf("us-east-1a/c3.xlarge = %+v", s)
	}
	at := time.Date(2015, 3, 11, 10, 59, 0, 0, time.UTC)
	if v, ok := s.At(at); !ok || v != 0.04 {
		t.Errorf("price at 10:59 = %v, %v; want 0.04", v, ok)
	}
	if _, ok := s.At(at.Add(-2 * time.Hour)); ok {
		t.Error("a price before the first point")
	}
	if err := p.SetOnDemand(nil); !errors.Is(err, ErrNoOnDemand) || !strings.Contains(err.Error(), "m3.medium") {
		t.Errorf("m3.medium has no on-demand price, got %v", err)
	}
	if err := p.SetOnDemand(map[string]float64{"m3.medium": 0.067, "m3.mediun": 0.07}); !errors.Is(err, ErrUnknownType) || !strings.Contains(err.Error(), "m3.mediun") {
		t.Errorf("a type with no market: %v", err)
	}
	if err := p.SetOnDemand(map[string]float64{"m3.medium": 0.067}); err != nil {
		t.Error(err)
	}
}

// TestReadPricesBOM: a trace saved with a UTF-8 byte order mark (a
// spreadsheet's "CSV UTF-8") reads as without. The CSV was refused, its
// header having no column "timestamp"; the JSON was read as a CSV.
func TestReadPricesBOM(t *testing.T) {
	for _, name := range []string{"prices.csv", "prices.json"} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := ReadPrices(filepath.Join("testdata", name), "")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, append([]byte("\xef\xbb\xbf"), raw...), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := ReadPrices(path, "")
		if err != nil {
			t.Fatalf("%s with a byte order mark: %v", name, err)
		}
		if len(p.Series) != len(want.Series) || !slices.Equal(p.Series[0].Points, want.Series[0].Points) {
			t.Errorf("%s with a byte order mark: %+v, want %+v", name, p.Series, want.Series)
		}
	}
}

func TestReadPricesJSON(t *testing.T) {
	p, err := ReadPrices("testdata/prices.json", "")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Series[0]
	if len(p.Series) != 1 || len(s.Points) != 2 || s.Points[0].Price != 0.04 || s.Product != "Linux/UNIX" {
		t.Fatalf("got %+v", s)
	}
	if !s.Points[0].At.Before(s.Points[1].At) {
		t.Error("AWS's newest-first order was not sorted")
	}
	// The list alone (aws ec2 describe-spot-price-history --query
	// SpotPriceHistory): the same prices.
	raw, err := os.ReadFile("testdata/prices.json")
	if err != nil {
		t.Fatal(err)
	}
	list := raw[bytes.IndexByte(raw, '[') : bytes.LastIndexByte(raw, ']')+1]
	q, err := ParsePricesJSON("list.json", list, "")
	if err != nil || len(q.Series) != 1 || !slices.Equal(q.Series[0].Points, s.Points) {
		t.Errorf("the list alone: %+v, %v", q, err)
	}
}

// TestPricesCorrupt is the corruption table: every bad input fails with
// the file and line of the bad row and the right sentinel.
func TestPricesCorrupt(t *testing.T) {
	const head = "timestamp,region,availability_zone,instance_type,product_description,spot_price_usd,ondemand_price_usd\n"
	const good = "2015-03-11 10:00:00+00:00,us-east-1,us-east-1a,c3.xlarge,Linux,0.04,0.21\n"
	entry := func(price, ts string) string {
		return `{"AvailabilityZone":"z","InstanceType":"t","ProductDescription":"Linux/UNIX","SpotPrice":"` + price + `","Timestamp":"` + ts + `"}`
	}
	cases := []struct {
		name, body, where string
		want              error
	}{
		{"empty file", "", "", ErrEmpty},
		{"header only", head, "", ErrEmpty},
		{"missing column", "timestamp,availability_zone\n", ":1:", ErrBadRow},
		{"short row", head + good + "2015-03-11,us-east-1\n", ":3:", ErrBadRow},
		{"bad time", head + strings.Replace(good, "2015-03-11 10", "yesterday 10", 1), ":2:", ErrBadRow},
		{"bad price", head + strings.Replace(good, "0.04", "cheap", 1), ":2:", ErrBadRow},
		{"negative price", head + strings.Replace(good, "0.04", "-0.04", 1), ":2:", ErrBadRow},
		{"NaN price", head + strings.Replace(good, "0.04", "NaN", 1), ":2:", ErrBadRow},
		{"unsorted", head + good + strings.Replace(good, "10:00", "09:00", 1), ":3:", ErrUnsorted},
		{"on-demand changes", head + good + strings.Replace(good, "0.21", "0.22", 1), ":3:", ErrBadRow},
		{"two products", head + good + strings.Replace(good, "Linux", "Windows", 1), ":3:", ErrBadRow},
		{"json empty", "{}", "", ErrEmpty},
		{"json not a list", `{"SpotPriceHistory": 3}`, ":1:", ErrBadRow},
		{"json price not a string", "{\"SpotPriceHistory\": [\n" + strings.Replace(entry("0.1", "2015-03-11T10:00:00Z"), `"0.1"`, "0.1", 1) + "]}", ":2:", ErrBadRow},
		{"json bad price", "{\"SpotPriceHistory\": [\n" + entry("0.1", "2015-03-11T10:00:00Z") + ",\n" + entry("x", "2015-03-11T10:00:00Z") + "]}", ":3:", ErrBadRow},
		{"json bad time", "{\"SpotPriceHistory\": [\n" + entry("0.1", "noon") + "]}", ":2:", ErrBadRow},
		{"json list, bad time", "[\n" + entry("0.1", "2015-03-11T10:00:00Z") + ",\n" + entry("0.1", "noon") + "]", ":3:", ErrBadRow},
		{"json truncated", "{\"SpotPriceHistory\": [\n" + entry("0.1", "2015-03-11T10:00:00Z")[:40], ":2:", ErrBadRow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p")
			if err := os.WriteFile(path, []byte(c.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadPrices(path, "")
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), path+c.where) {
				t.Errorf("error %q does not name %s%s", err, path, c.where)
			}
			if n := strings.Count(err.Error(), err.(interface{ Unwrap() error }).Unwrap().Error()); n != 1 {
				t.Errorf("error %q says %q %d times", err, c.want, n)
			}
		})
	}
}

// TestParseTime: the timestamps of AWS's API, of its CLI, of the CSV
// and of other tools.
func TestParseTime(t *testing.T) {
	want := time.Date(2023, 8, 1, 12, 30, 5, 0, time.UTC)
	for _, s := range []string{"2023-08-01T12:30:05Z", "2023-08-01T12:30:05.000Z", "2023-08-01T12:30:05+00:00",
		"2023-08-01T05:30:05-07:00", "2023-08-01T14:30:05.000+02:00", "2023-08-01T12:30:05+0000", "2023-08-01 12:30:05+00:00",
		"2023-08-01 12:30:05.000+00:00", "2023-08-01 12:30:05", "2023-08-01T12:30:05", "2023-08-01T12:30:05.000", " 2023-08-01 14:30:05+0200 "} {
		if got, err := ParseTime(s); err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"2023-08-01T12:30+00:00", "2023-08-01 14:30+02:00", "2023-08-01 12:30", "2023-08-01T12:30"} {
		if got, err := ParseTime(s); err != nil || !got.Equal(want.Truncate(time.Minute)) {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want.Truncate(time.Minute))
		}
	}
	for _, s := range []string{"2023-08-01T12", "12:30:05", "2023-08-01T12:30:05 PST", "1690893005"} {
		if got, err := ParseTime(s); !errors.Is(err, ErrBadRow) {
			t.Errorf("%q: %v, %v; want ErrBadRow", s, got, err)
		}
	}
}

// TestReadPricesFiles: the pages of one AWS answer read as the whole
// answer; a market's product or on-demand price may not differ between
// files; a page with a NextToken says so.
func TestReadPricesFiles(t *testing.T) {
	dir := t.TempDir()
	entry := func(zone, product, price, ts string) string {
		return `{"AvailabilityZone":"` + zone + `","InstanceType":"m5.large","ProductDescription":"` + product + `","SpotPrice":"` + price + `","Timestamp":"` + ts + `"}`
	}
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	page1 := write("page1.json", `{"SpotPriceHistory":[`+entry("eu-west-1a", "Linux/UNIX", "0.03", "2023-08-03T00:00:00.000Z")+","+
		entry("us-west-2a", "Linux/UNIX", "0.05", "2023-08-02T00:00:00+00:00")+`],"NextToken":"abc"}`)
	page2 := write("page2.json", `{"SpotPriceHistory":[`+entry("us-west-2a", "Linux/UNIX", "0.04", "2023-08-01T00:00:00Z")+`],"NextToken":""}`)
	p, err := ReadPricesFiles([]string{page1, page2}, "")
	if err != nil {
		t.Fatal(err)
	}
	s, ok := p.Lookup(market.Market{Zone: "us-west-2a", Type: "m5.large"})
	if len(p.Series) != 2 || !ok || len(s.Points) != 2 || s.Points[0].Price != 0.04 || s.Points[1].Price != 0.05 {
		t.Fatalf("got %+v", p.Series)
	}
	if !slices.Equal(p.Continued, []string{page1}) {
		t.Errorf("pages with a NextToken: %v, want %s", p.Continued, page1)
	}
	windows := write("windows.json", `{"SpotPriceHistory":[`+entry("us-west-2a", "Windows", "0.09", "2023-08-01T00:00:00Z")+`]}`)
	if _, err := ReadPricesFiles([]string{page1, windows}, ""); !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), windows) || !strings.Contains(err.Error(), "--product") {
		t.Errorf("a market of two products across files: %v", err)
	}
	if p, err := ReadPricesFiles([]string{page1, windows, page2}, "Linux/UNIX"); err != nil || len(p.Series) != 2 {
		t.Errorf("--product Linux/UNIX: %+v, %v", p, err)
	}
	if _, err := ReadPricesFiles([]string{windows, windows}, "Linux/UNIX"); !errors.Is(err, ErrEmpty) || !strings.Contains(err.Error(), windows+","+windows) {
		t.Errorf("no file with a price of the product: %v", err)
	}
	if _, err := ReadPricesFiles([]string{windows}, "Linux"); !errors.Is(err, ErrEmpty) || !strings.Contains(err.Error(), `only of ["Windows"]`) {
		t.Errorf("a --product the file does not have: %v, want the products it has", err)
	}
	csv1 := write("a.csv", "timestamp,availability_zone,instance_type,product_description,spot_price_usd,ondemand_price_usd\n2023-08-01 00:00:00,z,m5.large,Linux,0.04,0.096\n")
	csv2 := write("b.csv", "timestamp,availability_zone,instance_type,product_description,spot_price_usd,ondemand_price_usd\n2023-08-02 00:00:00,z,m5.large,Linux,0.04,0.1\n")
	if _, err := ReadPricesFiles([]string{csv1, csv2}, ""); !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), csv2) {
		t.Errorf("two on-demand prices across files: %v", err)
	}
}

func TestParseOnDemand(t *testing.T) {
	got, err := ParseOnDemand("c3.xlarge=0.21, r3.large=0.175")
	if err != nil || got["c3.xlarge"] != 0.21 || got["r3.large"] != 0.175 {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"c3.xlarge", "=0.2", "c3.xlarge=-1", "c3.xlarge=0", "c3.xlarge=x"} {
		if _, err := ParseOnDemand(bad); !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), "--ondemand-prices") {
			t.Errorf("%q: got %v", bad, err)
		}
	}
}

func TestBamboo(t *testing.T) {
	a, err := ReadAvailability("testdata/p3-trace.csv")
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != 32 || a.At(0) != 18 || a.At(time.Minute) != 19 {
		t.Errorf("size %d, at 0 %d, at 1 min %d; want 32, 18, 19", a.Size, a.At(0), a.At(time.Minute))
	}
	if _, err := ReadAvailability("testdata/g4dn-trace.csv"); err != nil {
		t.Error(err)
	}
	// Milliseconds since the epoch: offsets from the first event.
	b, err := ParseBamboo("epoch.csv", []byte("1638316800000,add,node1\n1638316800000,add,node2\n1638316860000,remove,node1\n"))
	if err != nil || b.At(0) != 2 || b.At(time.Minute) != 1 || b.End != time.Minute {
		t.Errorf("epoch milliseconds: %+v, %v; want 2 at 0, 1 from 1 min, the end at 1 min", b, err)
	}
	cases := []struct {
		name, body, where string
		want              error
	}{
		{"empty", "", "", ErrEmpty},
		{"fields", "0,add\n", ":1:", ErrBadRow},
		{"time", "soon,add,node1\n", ":1:", ErrBadRow},
		{"negative", "-5,add,node1\n", ":1:", ErrBadRow},
		{"unsorted", "10,add,node1\n5,add,node2\n", ":2:", ErrUnsorted},
		{"remove absent", "0,add,node1\n1,remove,node2\n", ":2:", ErrBadRow},
		{"add twice", "0,add,node1\n1,add,node1\n", ":2:", ErrBadRow},
		{"kind", "0,evict,node1\n", ":1:", ErrBadRow},
		{"centuries", "0,add,node1\n9223372036854775,remove,node1\n", ":2:", ErrBadRow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseBamboo("b.csv", []byte(c.body))
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), "b.csv"+c.where) {
				t.Fatalf("got %v, want %v at b.csv%s", err, c.want, c.where)
			}
		})
	}
}

// TestCounts reads Bamboo's GCP traces (instance counts over time) and
// refuses bad rows at their line.
func TestCounts(t *testing.T) {
	a, err := ReadAvailability("testdata/v100x1-east1c.txt")
	if err != nil {
		t.Fatal(err)
	}
	// 80 from 13:07:45; 70 is stamped 13:08:45, after a row stamped
	// 13:09:45, and holds from then; 60 likewise from 13:10:45.
	if a.Size != 80 || a.At(0) != 80 || a.At(2*time.Minute-time.Second) != 80 || a.At(2*time.Minute) != 70 || a.At(3*time.Minute) != 60 {
		t.Errorf("size %d, at 0, 1:59, 2:00, 3:00: %d %d %d %d; want 80, 80 80 70 60", a.Size, a.At(0), a.At(2*time.Minute-time.Second), a.At(2*time.Minute), a.At(3*time.Minute))
	}
	if want := 24*time.Hour + 10*time.Minute + 13*time.Second; a.End != want {
		t.Errorf("end %v, want %v", a.End, want)
	}
	a, err = ReadAvailability("testdata/a100x1-east1b.txt")
	if err != nil {
		t.Fatal(err)
	}
	if want := 27*time.Hour + time.Minute + 6*time.Second; a.Size != 64 || a.At(0) != 55 || a.At(4*time.Minute+20*time.Second) != 54 || a.End != want {
		t.Errorf("size %d, at 0 %d, at 4:20 %d, end %v; want 64, 55, 54, %v", a.Size, a.At(0), a.At(4*time.Minute+20*time.Second), a.End, want)
	}
	if a, err := ParseCounts("c.txt", []byte("2021-12-10T13:00:00+01:00, 4\n2021-12-10T12:30:00Z, 3\n")); err != nil || a.At(29*time.Minute) != 4 || a.At(30*time.Minute) != 3 {
		t.Errorf("TIMESTAMP, COUNT rows with zones: %+v, %v", a, err)
	}
	cases := []struct {
		name, body, where string
		want              error
	}{
		{"empty", "\n", "", ErrEmpty},
		{"fields", "2021-12-10, 13:07:45, 80, 1\n", ":1:", ErrBadRow},
		{"time", "2021-12-10, 13:07:45, 80\n2021-12-10, 25:07:45, 80\n", ":2:", ErrBadRow},
		{"date", "2021-12-10, 13:07:45, 80\n\n2021-13-10, 13:08:45, 80\n", ":3:", ErrBadRow},
		{"negative", "2021-12-10, 13:07:45, -1\n", ":1:", ErrBadRow},
		{"count", "2021-12-10, 13:07:45, 8.5\n", ":1:", ErrBadRow},
		{"back", "2021-12-10, 13:07:45, 80\n2021-12-10, 13:08:45, 70\n2021-12-10, 13:03:44, 60\n", ":3:", ErrUnsorted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseCounts("c.txt", []byte(c.body))
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), "c.txt"+c.where) {
				t.Fatalf("got %v, want %v at c.txt%s", err, c.want, c.where)
			}
		})
	}
}

// TestAvailabilityForm: ReadAvailability tells the forms apart by
// content, refuses one it does not know at its line, and a trace in
// which no instance is ever available.
func TestAvailabilityForm(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, body, where string
		want              error
	}{
		{"unknown", "\n# nodes\n0,add,node1\n", ":2:", ErrBadRow},
		{"counts of zero", "\n2021-12-10, 13:07:45, 0\n", "", ErrEmpty},
		{"events", "\n0,add,node1\n5,remove,node1\n", "", nil},
		{"counts", "\n2021-12-10, 13:07:45, 3\n", "", nil},
		{"skypilot of zeros", `{"metadata":{"gap_seconds":60},"data":[0,0]}`, "", ErrEmpty},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
			if err := os.WriteFile(path, []byte(c.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadAvailability(path)
			if !errors.Is(err, c.want) || (err != nil && !strings.Contains(err.Error(), path+c.where)) {
				t.Fatalf("got %v, want %v at %s%s", err, c.want, path, c.where)
			}
		})
	}
}

func TestSkyPilot(t *testing.T) {
	a, err := ReadAvailability("testdata/sky.json")
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != 1 || a.At(0) != 0 || a.At(90*time.Second) != 1 || a.At(4*time.Minute) != 0 || a.End != 7*time.Minute {
		t.Errorf("got %+v", a)
	}
	if a, err := ParseSkyPilot("f.json", []byte(`{"metadata":{"gap_seconds":60},"data":[16.0,12.0,1e1]}`)); err != nil || a.At(time.Minute) != 12 || a.At(2*time.Minute) != 10 {
		t.Errorf("counts written as floats: %+v, %v", a, err)
	}
	cases := []struct {
		name, body, where string
		want              error
	}{
		{"no data", `{"metadata":{"gap_seconds":60},"data":[]}`, "", ErrEmpty},
		{"no gap", `{"metadata":{},"data":[1]}`, ":1:", ErrBadRow},
		{"zero gap", `{"metadata":{"gap_seconds":0},"data":[1]}`, ":1:", ErrBadRow},
		{"negative count", "{\"metadata\":{\"gap_seconds\":60},\"data\":[\n1,\n-1]}", ":3:", ErrBadRow},
		{"fraction", "{\"metadata\":{\"gap_seconds\":60},\"data\":[\n1,\n0.5]}", ":3:", ErrBadRow},
		{"not a number", "{\"metadata\":{\"gap_seconds\":60},\"data\":[\n1,\nnull]}", ":3:", ErrBadRow},
		{"centuries", "{\"metadata\":{\n\"gap_seconds\":1e9},\"data\":[1,1,1,1,1,1,1,1,1,1]}", ":2:", ErrBadRow},
		{"syntax", "{\"metadata\":{\"gap_seconds\":60},\n\"data\":[1,}", ":2:", ErrBadRow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSkyPilot("s.json", []byte(c.body))
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), "s.json"+c.where) {
				t.Fatalf("got %v, want %v at s.json%s", err, c.want, c.where)
			}
		})
	}
}

// TestSharedTraces reads the published traces in ../shared/data/spot.
func TestSharedTraces(t *testing.T) {
	csv := filepath.Join(sharedSpot, "aws_spot_us-east-1_2015-03_to_2015-08.csv.gz")
	if _, err := os.Stat(csv); err != nil {
		t.Skipf("shared spot traces absent (%v): they are not shipped with the repository", err)
	}
	if testing.Short() {
		t.Skip("-short: the 2015 trace takes a second to read")
	}
	p, err := ReadPrices(csv, "")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range p.Series {
		n += len(s.Points)
		if s.OnDemand <= 0 {
			t.Errorf("%s has no on-demand price", s.Market)
		}
	}
	if len(p.Series) != 15 || n != 274099 {
		t.Errorf("%d markets, %d changes; want 15, 274099", len(p.Series), n)
	}
	files, _ := filepath.Glob(filepath.Join(sharedSpot, "skypilot", "*", "*", "*", "*.json"))
	if len(files) < 30 {
		t.Fatalf("found %d SkyPilot files", len(files))
	}
	for _, f := range files {
		if _, err := ReadAvailability(f); err != nil {
			t.Error(err)
		}
	}
}
