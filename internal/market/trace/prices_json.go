package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/terrace-ml/terrace/internal/market"
)

// awsEntry is one element of describe-spot-price-history's SpotPriceHistory.
type awsEntry struct {
	AvailabilityZone   string
	InstanceType       string
	ProductDescription string
	SpotPrice          string
	Timestamp          string
}

// ParsePricesJSON reads what `aws ec2 describe-spot-price-history` prints:
// {"SpotPriceHistory": [{"AvailabilityZone", "InstanceType",
// "ProductDescription", "SpotPrice", "Timestamp"}, ...], "NextToken": ...}.
// The list alone, as `--query SpotPriceHistory` prints it, reads too.
// AWS lists newest first and documents no order, so entries are sorted by
// time; an error names the line the entry starts on.
func ParsePricesJSON(source string, raw []byte, product string) (*Prices, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	lines := newLineIndex(raw)
	fail := func(off int64, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s: %w", source, lines.line(off), fmt.Sprintf(format, args...), ErrBadRow)
	}
	b := newBuilder(source, product)
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
		if err := readEntries(dec, b, lines, fail); err != nil {
			return nil, err
		}
		return b.done()
	}
	if err := expectDelim(dec, '{'); err != nil {
		return nil, fail(dec.InputOffset(), "not a JSON object: %v", err)
	}
	found, continued := false, false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fail(dec.InputOffset(), "%v", err)
		}
		if key, _ := tok.(string); key != "SpotPriceHistory" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, fail(dec.InputOffset(), "%v", err)
			}
			var token string
			if key == "NextToken" && json.Unmarshal(skip, &token) == nil && token != "" {
				continued = true
			}
			continue
		}
		found = true
		if err := readEntries(dec, b, lines, fail); err != nil {
			return nil, err
		}
	}
	if !found {
		return nil, fmt.Errorf("%s: no SpotPriceHistory: %w", source, ErrEmpty)
	}
	p, err := b.done()
	if err == nil && continued {
		p.Continued = []string{source}
	}
	return p, err
}

func readEntries(dec *json.Decoder, b *builder, lines lineIndex, fail func(int64, string, ...any) error) error {
	if err := expectDelim(dec, '['); err != nil {
		return fail(dec.InputOffset(), "SpotPriceHistory is not a list: %v", err)
	}
	for dec.More() {
		off := lines.valueStart(dec.InputOffset())
		var e awsEntry
		if err := dec.Decode(&e); err != nil {
			return fail(off, "%v", err)
		}
		line := lines.line(off)
		at, err := ParseTime(e.Timestamp)
		if err != nil {
			return b.fieldErr(line, "Timestamp", err)
		}
		price, err := parsePrice(e.SpotPrice)
		if err != nil || e.SpotPrice == "" {
			return fail(off, "SpotPrice %q is not a price", e.SpotPrice)
		}
		m := market.Market{Zone: e.AvailabilityZone, Type: e.InstanceType}
		if m.Zone == "" || m.Type == "" {
			return fail(off, "entry without AvailabilityZone or InstanceType")
		}
		if err := b.add(line, m, e.ProductDescription, at, price, 0, false); err != nil {
			return err
		}
	}
	_, err := dec.Token() // ']'
	return err
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return ErrEmpty
	}
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("found %v, want %q", tok, want)
	}
	return nil
}

// lineIndex maps byte offsets of one file to 1-based line numbers.
type lineIndex struct {
	raw      []byte
	newlines []int64
}

func newLineIndex(raw []byte) lineIndex {
	l := lineIndex{raw: raw}
	for i, c := range raw {
		if c == '\n' {
			l.newlines = append(l.newlines, int64(i))
		}
	}
	return l
}

func (l lineIndex) line(off int64) int {
	return sort.Search(len(l.newlines), func(i int) bool { return l.newlines[i] >= off }) + 1
}

// valueStart skips the separators and spaces after off: the decoder's
// offset sits just after the previous token, and the entry's line is
// where the entry itself starts.
func (l lineIndex) valueStart(off int64) int64 {
	for off < int64(len(l.raw)) && bytes.IndexByte([]byte(", \t\r\n"), l.raw[off]) >= 0 {
		off++
	}
	return off
}

// lineOf returns the line of the first occurrence of s (1 if none).
func (l lineIndex) lineOf(s string) int {
	if i := bytes.Index(l.raw, []byte(s)); i >= 0 {
		return l.line(int64(i))
	}
	return 1
}

// lineOfNth returns the line of the n-th element of the file's "data"
// array (the files put them on one line or one a line).
func (l lineIndex) lineOfNth(n int) int {
	i := bytes.Index(l.raw, []byte(`"data"`))
	if i < 0 {
		return 1
	}
	j := bytes.IndexByte(l.raw[i:], '[')
	if j < 0 {
		return l.line(int64(i))
	}
	off := int64(i + j + 1)
	for k := 0; k < n && off < int64(len(l.raw)); off++ {
		if l.raw[off] == ',' {
			k++
		}
	}
	return l.line(l.valueStart(off))
}
