package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/market"
)

var (
	// ErrEmpty: a trace with no data.
	ErrEmpty = errors.New("empty trace")
	// ErrUnsorted: time goes backwards within one market or trace.
	ErrUnsorted = errors.New("time goes backwards")
	// ErrBadRow: a row or entry that does not parse or makes no sense.
	ErrBadRow = errors.New("bad row")
	// ErrNoOnDemand: a market whose instance type has no on-demand price.
	ErrNoOnDemand = errors.New("no on-demand price")
	// ErrUnknownType: an on-demand price for an instance type the trace
	// has no market of (a typo would otherwise be ignored).
	ErrUnknownType = errors.New("no market of that instance type")
)

// Point is a price in force from At on.
type Point struct {
	At    time.Time
	Price float64
}

// Series is one market's price changes, sorted by time.
type Series struct {
	Market   market.Market
	Product  string
	Points   []Point
	OnDemand float64 // dollars per hour; 0 until known
}

// At returns the price in force at t and whether any was (t before the
// first point has none).
func (s *Series) At(t time.Time) (float64, bool) {
	i := sort.Search(len(s.Points), func(i int) bool { return s.Points[i].At.After(t) })
	if i == 0 {
		return 0, false
	}
	return s.Points[i-1].Price, true
}

// Prices is every market of one price trace.
type Prices struct {
	Source string
	Series []*Series // sorted by market
	// Continued lists the files that are one page of a longer AWS
	// answer (a NextToken to ask for the next).
	Continued []string
}

// Span returns the first and last times of the trace.
func (p *Prices) Span() (first, last time.Time) {
	for i, s := range p.Series {
		a, b := s.Points[0].At, s.Points[len(s.Points)-1].At
		if i == 0 || a.Before(first) {
			first = a
		}
		if i == 0 || b.After(last) {
			last = b
		}
	}
	return first, last
}

// Lookup returns the series of market m.
func (p *Prices) Lookup(m market.Market) (*Series, bool) {
	i := sort.Search(len(p.Series), func(i int) bool { return !lessMarket(p.Series[i].Market, m) })
	if i < len(p.Series) && p.Series[i].Market == m {
		return p.Series[i], true
	}
	return nil, false
}

// SetOnDemand sets on-demand prices by instance type (overriding the
// trace's own) and fails if any market is left without one, or if a type
// given has no market in the trace.
func (p *Prices) SetOnDemand(byType map[string]float64) error {
	for typ := range byType {
		if !slices.ContainsFunc(p.Series, func(s *Series) bool { return s.Market.Type == typ }) {
			return fmt.Errorf("--ondemand-prices: %s: %w in %s", typ, ErrUnknownType, p.Source)
		}
	}
	for _, s := range p.Series {
		if v, ok := byType[s.Market.Type]; ok {
			s.OnDemand = v
		}
		if s.OnDemand <= 0 {
			return fmt.Errorf("%s: instance type %s: %w (give it with --ondemand-prices %s=PRICE)",
				p.Source, s.Market.Type, ErrNoOnDemand, s.Market.Type)
		}
	}
	return nil
}

// ParseOnDemand reads a TYPE=PRICE[,TYPE=PRICE...] list (the
// --ondemand-prices flag).
func ParseOnDemand(list string) (map[string]float64, error) {
	out := map[string]float64{}
	if strings.TrimSpace(list) == "" {
		return out, nil
	}
	for _, item := range strings.Split(list, ",") {
		typ, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || typ == "" {
			return nil, fmt.Errorf("--ondemand-prices: %q is not TYPE=PRICE: %w", item, ErrBadRow)
		}
		p, err := parsePrice(val)
		if err != nil {
			return nil, fmt.Errorf("--ondemand-prices: %s: %w", typ, err)
		}
		if p == 0 {
			return nil, fmt.Errorf("--ondemand-prices: %s: price 0: %w", typ, ErrBadRow)
		}
		out[typ] = p
	}
	return out, nil
}

func parsePrice(s string) (float64, error) {
	var v float64
	if _, err := fmt.Sscan(strings.TrimSpace(s), &v); err != nil {
		return 0, fmt.Errorf("price %q: %w", s, ErrBadRow)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("price %q: %w", s, ErrBadRow)
	}
	return v, nil
}

// timeLayouts: Go also reads fractional seconds the layout does not
// show.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05Z07:00", "2006-01-02T15:04:05Z0700", "2006-01-02 15:04:05Z0700",
	"2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04Z07:00", "2006-01-02 15:04Z07:00", "2006-01-02T15:04", "2006-01-02 15:04"}

// ParseTime reads a trace timestamp or a --from flag: RFC 3339, or the
// CSV's "2006-01-02 15:04:05+00:00", with a 'T' or a space, fractional
// seconds, none or no seconds at all (a spreadsheet's export), a zone as
// +00:00, +0000 or Z, or none (then UTC).
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("time %q: %w", s, ErrBadRow)
}

func lessMarket(a, b market.Market) bool {
	if a.Zone != b.Zone {
		return a.Zone < b.Zone
	}
	return a.Type < b.Type
}

// builder collects rows into series, checking order and products.
type builder struct {
	source  string
	product string // only rows of this product; "" keeps all
	series  map[market.Market]*Series
	lastRow map[market.Market]int
	others  map[string]bool // products left out
}

func newBuilder(source, product string) *builder {
	return &builder{source: source, product: product, series: map[market.Market]*Series{}, lastRow: map[market.Market]int{}, others: map[string]bool{}}
}

func (b *builder) rowErr(line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s: %w", b.source, line, fmt.Sprintf(format, args...), ErrBadRow)
}

// fieldErr names the field of a row whose parser failed with err.
func (b *builder) fieldErr(line int, field string, err error) error {
	return fmt.Errorf("%s:%d: %s: %w", b.source, line, field, err)
}

// add records one price change; sorted says whether rows must already be
// in time order within a market.
func (b *builder) add(line int, m market.Market, product string, at time.Time, price, onDemand float64, sorted bool) error {
	if b.product != "" && product != b.product {
		b.others[product] = true
		return nil
	}
	s, ok := b.series[m]
	if !ok {
		s = &Series{Market: m, Product: product, OnDemand: onDemand}
		b.series[m] = s
	}
	if s.Product != product {
		return b.rowErr(line, "market %s has products %q and %q (choose one with --product)", m, s.Product, product)
	}
	if onDemand > 0 && s.OnDemand > 0 && onDemand != s.OnDemand {
		return b.rowErr(line, "on-demand price of %s changes from %g to %g", m, s.OnDemand, onDemand)
	}
	if n := len(s.Points); sorted && n > 0 && at.Before(s.Points[n-1].At) {
		return fmt.Errorf("%s:%d: %s at %s after %s (line %d): %w", b.source, line, m,
			at.Format(time.RFC3339), s.Points[n-1].At.Format(time.RFC3339), b.lastRow[m], ErrUnsorted)
	}
	s.Points = append(s.Points, Point{At: at, Price: price})
	b.lastRow[m] = line
	return nil
}

func (b *builder) done() (*Prices, error) {
	if len(b.series) == 0 && len(b.others) > 0 {
		return nil, fmt.Errorf("%s: no prices of product %q (--product), only of %q: %w", b.source, b.product, slices.Sorted(maps.Keys(b.others)), ErrEmpty)
	}
	if len(b.series) == 0 {
		return nil, fmt.Errorf("%s: no prices: %w", b.source, ErrEmpty)
	}
	p := &Prices{Source: b.source}
	for _, s := range b.series {
		sort.SliceStable(s.Points, func(i, j int) bool { return s.Points[i].At.Before(s.Points[j].At) })
		p.Series = append(p.Series, s)
	}
	sort.Slice(p.Series, func(i, j int) bool { return lessMarket(p.Series[i].Market, p.Series[j].Market) })
	return p, nil
}

// readAll reads a file, gunzipping it if it is gzip, without the UTF-8
// byte order mark a spreadsheet's "CSV UTF-8" export starts with (a CSV
// so saved was refused: its header had no column "timestamp", and a JSON
// file was read as a CSV).
func readAll(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	if len(raw) >= 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: gunzip: %w", path, err)
		}
		raw, err = io.ReadAll(zr)
		if err != nil {
			return nil, fmt.Errorf("%s: gunzip: %w", path, err)
		}
	}
	return bytes.TrimPrefix(raw, []byte("\xef\xbb\xbf")), nil
}

// ReadPrices reads a price trace in either published form: AWS's JSON if
// it starts with '{' (or '[', the list alone), else the CSV. Product keeps only rows of that
// product description ("" keeps all, but then one market may not mix two).
func ReadPrices(path, product string) (*Prices, error) {
	raw, err := readAll(path)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(raw); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		return ParsePricesJSON(path, raw, product)
	}
	return ParsePricesCSV(path, raw, product)
}

// ReadPricesFiles reads several price traces (the pages of one AWS
// answer, or histories of other zones or types, in either form) as one:
// a market's points from all files, in time order. A market may not have
// two products or two on-demand prices across the files. One file of
// several may hold no prices (of the product): AWS's pages can be empty.
func ReadPricesFiles(paths []string, product string) (*Prices, error) {
	all := &Prices{Source: strings.Join(paths, ",")}
	byMarket := map[market.Market]*Series{}
	from := map[market.Market]string{}
	for _, path := range paths {
		p, err := ReadPrices(path, product)
		if errors.Is(err, ErrEmpty) && len(paths) > 1 {
			continue
		}
		if err != nil {
			return nil, err
		}
		all.Continued = append(all.Continued, p.Continued...)
		for _, s := range p.Series {
			have, ok := byMarket[s.Market]
			switch {
			case !ok:
				byMarket[s.Market], from[s.Market] = s, path
				all.Series = append(all.Series, s)
			case have.Product != s.Product:
				return nil, fmt.Errorf("%s: market %s has product %q, and %q in %s (choose one with --product): %w", path, s.Market, s.Product, have.Product, from[s.Market], ErrBadRow)
			case have.OnDemand > 0 && s.OnDemand > 0 && have.OnDemand != s.OnDemand:
				return nil, fmt.Errorf("%s: on-demand price of %s is %g, and %g in %s: %w", path, s.Market, s.OnDemand, have.OnDemand, from[s.Market], ErrBadRow)
			default:
				have.Points = append(have.Points, s.Points...)
				have.OnDemand = max(have.OnDemand, s.OnDemand)
			}
		}
	}
	if len(all.Series) == 0 {
		return nil, fmt.Errorf("%s: no prices: %w", all.Source, ErrEmpty)
	}
	for _, s := range all.Series {
		sort.SliceStable(s.Points, func(i, j int) bool { return s.Points[i].At.Before(s.Points[j].At) })
	}
	sort.Slice(all.Series, func(i, j int) bool { return lessMarket(all.Series[i].Market, all.Series[j].Market) })
	return all, nil
}
