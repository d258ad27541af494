package data

import (
	"bytes"
	"fmt"
	"io"
	"math"
)

// Ratings holds (user, item, rating) triples, such as MovieLens ratings,
// in file order.
type Ratings struct {
	Users  []uint32 // ids as given in the file (MovieLens counts from 1)
	Items  []uint32
	Values []float32
	// NumUsers and NumItems are the largest id plus one, so that ids index
	// factor matrices directly; ids never seen are rows that stay untrained.
	NumUsers, NumItems int
}

// Len returns the number of ratings.
func (r *Ratings) Len() int { return len(r.Values) }

// Mean returns the mean rating, or 0 when there are none; matrix
// factorisation uses it as the global bias.
func (r *Ratings) Mean() float64 {
	if len(r.Values) == 0 {
		return 0
	}
	var sum float64
	for _, v := range r.Values {
		sum += float64(v)
	}
	return sum / float64(len(r.Values))
}

// Range returns the smallest and largest rating (0, 0 when there are
// none): the scale a prediction is clipped to, which is 1-5 for MovieLens
// 100K, 0.5-5 for the later MovieLens sets and -10-10 for Jester.
func (r *Ratings) Range() (lo, hi float32) {
	if len(r.Values) == 0 {
		return 0, 0
	}
	lo, hi = r.Values[0], r.Values[0]
	for _, v := range r.Values[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// ReadRatings reads a ratings file, plain or gzip-compressed. See
// ParseRatings.
func ReadRatings(path string) (*Ratings, error) {
	return readFile(path, ParseRatings)
}

// ParseRatings reads lines "user item rating [timestamp]", plain or
// gzip-compressed (detected from the magic bytes), naming errors after name.
// Fields are separated by runs of spaces or tabs (MovieLens u.data), by
// "::" when a line holds one (MovieLens 1M and 10M ratings.dat) or, when a
// line holds a comma, by commas (ratings.csv), with optional spaces
// around either. Ids are decimal uint32s, the rating a finite float32, and
// the timestamp, which is checked but not kept, a non-negative integer or
// a date (YYYY-MM-DD). Blank lines are skipped, and so is a header: a
// first line whose fields are all words, such as
// "userId,movieId,rating,timestamp".
//
// The Netflix Prize's files (training_set/mv_*.txt, combined_data_*.txt)
// are read too: a line "item:" starts each item's ratings, one a line as
// "user,rating,date". A file whose first line is "item:" is read so.
//
// A malformed line gives a *LineError wrapping ErrMalformed.
func ParseRatings(r io.Reader, name string) (*Ratings, error) {
	rs := &Ratings{}
	var maxUser, maxItem uint32
	first := true
	// netflix: the file is the Netflix Prize's, whose lines are
	// "user,rating,date" after an "item:" line.
	var netflix bool
	var item []byte // the current item line's id (a copy: lines are reused)
	var fields [5][]byte
	err := eachLine(r, name, func(line []byte) string {
		n := splitFields(line, &fields)
		if n == 0 {
			return ""
		}
		if id, ok := itemLine(line); ok {
			if !first && !netflix {
				return fmt.Sprintf("item line %s in a file that did not start with one (the Netflix Prize's files do)", quote(trimSpace(line)))
			}
			if _, reason := parseID("item", id); reason != "" {
				return reason
			}
			first, netflix, item = false, true, append(item[:0], id...)
			return ""
		}
		if first {
			first = false
			if isHeader(fields[:min(n, len(fields))]) {
				return ""
			}
		}
		if netflix {
			if n < 2 || n > 3 {
				return fmt.Sprintf("%d fields, want user,rating[,date] after an item line (the Netflix Prize's format)", n)
			}
			// As user item rating [date], which parseRating reads.
			fields[3], fields[2], fields[1] = fields[2], fields[1], item
			n++
		} else if n < 3 || n > 4 {
			return fmt.Sprintf("%d fields, want user item rating [timestamp]", n)
		}
		u, i, v, reason := parseRating(fields[:n])
		if reason != "" {
			return reason
		}
		rs.Users = append(rs.Users, u)
		rs.Items = append(rs.Items, i)
		rs.Values = append(rs.Values, v)
		maxUser, maxItem = max(maxUser, u), max(maxItem, i)
		return ""
	})
	if err != nil {
		return nil, err
	}
	if rs.Len() > 0 {
		rs.NumUsers, rs.NumItems = int(maxUser)+1, int(maxItem)+1
	}
	return rs, nil
}

var doubleColon = []byte("::")

// splitFields stores up to len(f) fields of line in f and returns how many
// fields the line has in all (possibly more than len(f)). Empty fields count
// only between commas, where they are an error the caller reports.
func splitFields(line []byte, f *[5][]byte) int {
	n := 0
	sep := []byte(",")
	if bytes.Contains(line, doubleColon) {
		sep = doubleColon // MovieLens 1M and 10M: user::item::rating::timestamp
	}
	if bytes.Contains(line, sep) {
		for {
			i := bytes.Index(line, sep)
			tok := line
			if i >= 0 {
				tok = line[:i]
			}
			if n < len(f) {
				f[n] = trimSpace(tok)
			}
			n++
			if i < 0 {
				return n
			}
			line = line[i+len(sep):]
		}
	}
	for {
		var tok []byte
		tok, line = field(line)
		if len(tok) == 0 {
			return n
		}
		if n < len(f) {
			f[n] = tok
		}
		n++
	}
}

// parseRating parses the 3 or 4 fields of a rating line.
func parseRating(f [][]byte) (user, item uint32, v float32, reason string) {
	if user, reason = parseID("user", f[0]); reason != "" {
		return
	}
	if item, reason = parseID("item", f[1]); reason != "" {
		return
	}
	if v, reason = parseFloat32(f[2]); reason != "" {
		return 0, 0, 0, fmt.Sprintf("rating %s %s", quote(f[2]), reason)
	}
	if len(f) == 4 {
		if _, ok, _ := parseUint(f[3], math.MaxInt64); !ok && !isDate(f[3]) {
			return 0, 0, 0, fmt.Sprintf("timestamp %s is neither a non-negative integer nor a date (YYYY-MM-DD)", quote(f[3]))
		}
	}
	return user, item, v, ""
}

// isDate reports whether b is a date YYYY-MM-DD, as the Netflix Prize's
// files give the day of each rating.
func isDate(b []byte) bool {
	if len(b) != 10 || b[4] != '-' || b[7] != '-' {
		return false
	}
	for i, c := range b {
		if i != 4 && i != 7 && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// itemLine reports whether line is a Netflix Prize item line, "id:", and
// returns the id's digits.
func itemLine(line []byte) ([]byte, bool) {
	line = trimSpace(line)
	n := len(line)
	if n < 2 || line[n-1] != ':' || line[n-2] == ':' {
		return nil, false
	}
	_, ok, _ := parseUint(line[:n-1], math.MaxUint64)
	return line[:n-1], ok
}

// isHeader reports whether every field is a word, not a number; "inf" and
// "nan" are numbers here so that a bad data line is never mistaken for one.
func isHeader(fields [][]byte) bool {
	for _, f := range fields {
		if len(f) == 0 || !(f[0] >= 'a' && f[0] <= 'z' || f[0] >= 'A' && f[0] <= 'Z') {
			return false
		}
		if _, reason := parseFloat32(f); reason != "is not a number" {
			return false
		}
	}
	return true
}

// trimSpace is bytes.TrimSpace restricted to the ASCII separators of isSpace.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func parseID(what string, b []byte) (uint32, string) {
	v, ok, tooBig := parseUint(b, math.MaxUint32)
	switch {
	case tooBig:
		return 0, fmt.Sprintf("%s id %s does not fit in 32 bits", what, quote(b))
	case !ok:
		return 0, fmt.Sprintf("%s id %s is not a non-negative integer", what, quote(b))
	}
	return uint32(v), ""
}
