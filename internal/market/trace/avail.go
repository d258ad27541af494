package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Availability is how many of a probed set of machines were available (or
// still running) over time: Counts[i] holds from Offsets[i] (since the
// trace's start) until the next offset. Size is the set's size, the most
// ever available at once.
type Availability struct {
	Source  string
	Offsets []time.Duration
	Counts  []int
	Size    int
	// End is the offset where the trace stops saying anything.
	End time.Duration
}

// At returns the count in force at offset d (0 before the start, the last
// count after the end).
func (a *Availability) At(d time.Duration) int {
	i := sort.Search(len(a.Offsets), func(i int) bool { return a.Offsets[i] > d })
	if i == 0 {
		return 0
	}
	return a.Counts[i-1]
}

// ReadAvailability reads a preemption or availability trace in any of
// its published forms, told apart by content: SkyPilot's JSON if it
// starts with '{'; else, by the first field of the first row, Bamboo's
// event CSV (milliseconds) or Bamboo's GCP instance counts (a date).
func ReadAvailability(path string) (*Availability, error) {
	raw, err := readAll(path)
	if err != nil {
		return nil, err
	}
	parse, err := availForm(path, raw)
	if err != nil {
		return nil, err
	}
	a, err := parse(path, raw)
	if err != nil {
		return nil, err
	}
	if a.Size == 0 {
		// A market no machine was ever available in would also read,
		// to a policy, as one without a trace.
		return nil, fmt.Errorf("%s: no instance is available at any time: %w", path, ErrEmpty)
	}
	return a, nil
}

func availForm(path string, raw []byte) (func(string, []byte) (*Availability, error), error) {
	t := bytes.TrimSpace(raw)
	if len(t) > 0 && t[0] == '{' {
		return ParseSkyPilot, nil
	}
	first, _, _ := bytes.Cut(t, []byte("\n"))
	field, _, _ := strings.Cut(string(first), ",")
	if _, err := strconv.ParseInt(strings.TrimSpace(field), 10, 64); err == nil || len(t) == 0 {
		return ParseBamboo, nil
	}
	if _, err := ParseTime(field); err == nil {
		return ParseCounts, nil
	}
	line := bytes.Count(raw[:bytes.Index(raw, first)], []byte("\n")) + 1
	return nil, fmt.Errorf("%s:%d: %q starts none of the preemption trace forms: Bamboo's ms,add|remove,node; a date, time and count (Bamboo's GCP traces); SkyPilot's JSON: %w",
		path, line, strings.TrimSpace(string(first)), ErrBadRow)
}

// ParseBamboo reads Bamboo's (NSDI '23) eviction traces: lines of
// `ms_timestamp,add|remove,nodeN`, in time order, a node added only while
// absent and removed only while present. Offsets count from the first
// event: Bamboo's own start at 0, but milliseconds since the Unix epoch
// would otherwise put decades of nothing before the first node.
func ParseBamboo(source string, raw []byte) (*Availability, error) {
	a := &Availability{Source: source}
	present := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	line, first, last := 0, int64(-1), int64(-1)
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		f := strings.Split(text, ",")
		if len(f) != 3 {
			return nil, fmt.Errorf("%s:%d: %q is not ms,add|remove,node: %w", source, line, text, ErrBadRow)
		}
		ms, err := strconv.ParseInt(strings.TrimSpace(f[0]), 10, 64)
		if err != nil || ms < 0 {
			return nil, fmt.Errorf("%s:%d: time %q is not milliseconds: %w", source, line, f[0], ErrBadRow)
		}
		if ms < last {
			return nil, fmt.Errorf("%s:%d: %d ms after %d ms: %w", source, line, ms, last, ErrUnsorted)
		}
		if first < 0 {
			first = ms
		}
		if ms-first > int64(math.MaxInt64/time.Millisecond) {
			return nil, fmt.Errorf("%s:%d: %d ms is centuries after the first event (%d ms): %w", source, line, ms, first, ErrBadRow)
		}
		last = ms
		node := strings.TrimSpace(f[2])
		switch op := strings.TrimSpace(f[1]); {
		case node == "":
			return nil, fmt.Errorf("%s:%d: no node: %w", source, line, ErrBadRow)
		case op == "add" && !present[node]:
			present[node] = true
		case op == "remove" && present[node]:
			delete(present, node)
		case op == "add" || op == "remove":
			return nil, fmt.Errorf("%s:%d: %s %s, which is %s: %w", source, line, op, node, presence(present[node]), ErrBadRow)
		default:
			return nil, fmt.Errorf("%s:%d: event %q is neither add nor remove: %w", source, line, op, ErrBadRow)
		}
		a.set(time.Duration(ms-first)*time.Millisecond, len(present))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", source, line+1, err)
	}
	if len(a.Offsets) == 0 {
		return nil, fmt.Errorf("%s: no events: %w", source, ErrEmpty)
	}
	a.End = a.Offsets[len(a.Offsets)-1]
	return a, nil
}

// maxStampSkew is how far a row of a count trace may be stamped before a
// row above it. A sampling log's rows are written in the order they were
// observed, but their stamps can run back a little: in Bamboo's
// v100x1-east1c.txt each count is written three times a minute apart and
// the next count's first stamp can fall up to a minute before the
// previous one's last. Such a row takes effect at the latest stamp
// seen (the file's order is the order of observation); a row further
// back than this means the file's parts are out of order (two logs
// concatenated), which is refused rather than guessed at.
const maxStampSkew = 5 * time.Minute

// ParseCounts reads a trace of instance counts over time, the form of
// Bamboo's (NSDI '23) GCP traces: lines of `YYYY-MM-DD, HH:MM:SS, N`
// (or `TIMESTAMP, N`), N the number of instances of the cluster running
// from that time on. A time without a zone is taken as UTC: only the
// offsets from the first row matter.
func ParseCounts(source string, raw []byte) (*Availability, error) {
	a := &Availability{Source: source}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	var t0, latest time.Time
	line, latestLine := 0, 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		f := strings.Split(text, ",")
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("%s:%d: %q is not DATE, TIME, COUNT: %w", source, line, text, ErrBadRow)
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		at, err := ParseTime(strings.Join(f[:len(f)-1], " "))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", source, line, err)
		}
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s:%d: count %q is not a number of instances: %w", source, line, f[len(f)-1], ErrBadRow)
		}
		switch {
		case latestLine == 0:
			t0, latest, latestLine = at, at, line
		case latest.Sub(at) > maxStampSkew:
			return nil, fmt.Errorf("%s:%d: %s after %s (line %d), more than %v back: %w", source, line,
				at.Format(time.DateTime), latest.Format(time.DateTime), latestLine, maxStampSkew, ErrUnsorted)
		case at.After(latest):
			latest, latestLine = at, line
		}
		a.set(latest.Sub(t0), n)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", source, line+1, err)
	}
	if len(a.Offsets) == 0 {
		return nil, fmt.Errorf("%s: no counts: %w", source, ErrEmpty)
	}
	a.End = latest.Sub(t0)
	return a, nil
}

func presence(p bool) string {
	if p {
		return "already present"
	}
	return "not present"
}

// set records count n from offset d, folding events at the same instant.
func (a *Availability) set(d time.Duration, n int) {
	if k := len(a.Offsets); k > 0 && a.Offsets[k-1] == d {
		a.Counts[k-1] = n
	} else if k == 0 || a.Counts[k-1] != n {
		a.Offsets = append(a.Offsets, d)
		a.Counts = append(a.Counts, n)
	}
	if n > a.Size {
		a.Size = n
	}
}

// ParseSkyPilot reads SkyPilot's spot traces (Can't Be Late, NSDI '24):
// {"metadata": {"gap_seconds": G}, "data": [n, ...]}, one count a tick of G
// seconds: the number of instances available (availability traces) or
// still running (preemption traces). 1 means available: see
// docs/design/market.md for why that is the sense of the preemption files.
func ParseSkyPilot(source string, raw []byte) (*Availability, error) {
	lines := newLineIndex(raw)
	var doc struct {
		Metadata struct {
			GapSeconds *float64 `json:"gap_seconds"`
		} `json:"metadata"`
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		line := 1
		if se, ok := err.(*json.SyntaxError); ok {
			line = lines.line(se.Offset)
		}
		return nil, fmt.Errorf("%s:%d: %v: %w", source, line, err, ErrBadRow)
	}
	gap := doc.Metadata.GapSeconds
	if gap == nil || *gap <= 0 || *gap > 1e9 {
		return nil, fmt.Errorf("%s:%d: metadata.gap_seconds missing or not positive: %w", source, lines.lineOf("gap_seconds"), ErrBadRow)
	}
	if len(doc.Data) == 0 {
		return nil, fmt.Errorf("%s: no data: %w", source, ErrEmpty)
	}
	if float64(len(doc.Data))**gap > float64(math.MaxInt64)/float64(time.Second) {
		return nil, fmt.Errorf("%s:%d: %d ticks of %g s: centuries: %w", source, lines.lineOf("gap_seconds"), len(doc.Data), *gap, ErrBadRow)
	}
	a := &Availability{Source: source}
	step := time.Duration(*gap * float64(time.Second))
	for i, v := range doc.Data {
		// A count written as a float (1.0, as a converted trace may have
		// it) is a count; 0.5 is not.
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || f < 0 || f != math.Trunc(f) || f > math.MaxInt32 {
			return nil, fmt.Errorf("%s:%d: data[%d] = %s is not a count: %w", source, lines.lineOfNth(i), i, v, ErrBadRow)
		}
		a.set(time.Duration(i)*step, int(f))
	}
	a.End = time.Duration(len(doc.Data)) * step
	return a, nil
}
