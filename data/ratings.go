package data

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Ratings holds (user, item, rating) triples, such as MovieLens ratings,
// in file order.
type Ratings struct {
	Users  []uint32 // ids as given in the file (MovieLens counts from 1), or the numbers of string ids (UserIDs)
	Items  []uint32
	Values []float32
	// NumUsers and NumItems are the largest id plus one (with a
	// dictionary, its size), so that ids index factor matrices directly;
	// ids never seen are rows that stay untrained.
	NumUsers, NumItems int
	// UserIDs and ItemIDs are nil when the column's ids are numbers, kept
	// as given; otherwise the column's ids were strings, and user n is
	// UserIDs.ID(n). A file read with another's dictionaries
	// (ReadRatingsWith) shares them, Unseen numbering the ids they lack.
	UserIDs, ItemIDs *IDs
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

// ReadRatingsWith reads a ratings file whose ids are numbered as another
// file's were (a test file as its training file). See ParseRatingsWith.
func ReadRatingsWith(path string, users, items *IDs) (*Ratings, error) {
	return readFile(path, func(r io.Reader, name string) (*Ratings, error) {
		return ParseRatingsWith(r, name, users, items)
	})
}

// ParseRatings reads lines "user item rating [timestamp]", plain or
// gzip-compressed (detected from the magic bytes), naming errors after name.
// Fields are separated by runs of spaces or tabs (MovieLens u.data), or
// by the first of "::" (MovieLens 1M and 10M ratings.dat), ";"
// (Book-Crossing) or "," (ratings.csv, Amazon's) a line holds outside
// double quotes, with optional spaces around either. A field may be
// quoted, "" standing for a quote inside it. The rating is a finite
// float32, and the timestamp, which is checked but not kept, a
// non-negative integer or a date (YYYY-MM-DD, with a time of day or
// not). Blank lines are skipped, and so is a header: a first line whose
// fields are all words, such as "userId,movieId,rating,timestamp".
//
// Ids are kept as given, NumUsers and NumItems being the largest plus
// one, when every id of the column is a decimal number below 2^32. A
// column with any other id (Amazon's "AKM1MP6P0OYPR", an ISBN such as
// "034545104X") is numbered densely instead, each distinct id in the
// order it first occurs; UserIDs or ItemIDs then holds its ids. Such an
// id is any text but an empty one or one holding a control character.
//
// The Netflix Prize's files (training_set/mv_*.txt, combined_data_*.txt)
// are read too: a line "item:" starts each item's ratings, one a line as
// "user,rating,date". A file whose first line is "item:" is read so.
//
// A malformed line gives a *LineError wrapping ErrMalformed.
func ParseRatings(r io.Reader, name string) (*Ratings, error) {
	return parseRatings(r, name, &idColumn{what: "user"}, &idColumn{what: "item"})
}

// ParseRatingsWith reads ratings as ParseRatings does, but numbers their
// ids as another file's were: a column whose dictionary (users, items)
// is nil holds numbers, kept as given, and any other id is an error; a
// column with a dictionary numbers its ids by it, and an id the
// dictionary lacks is Unseen. A test file read with its training file's
// UserIDs and ItemIDs so gives every user and item the training's
// number; the dictionaries are only read.
func ParseRatingsWith(r io.Reader, name string, users, items *IDs) (*Ratings, error) {
	return parseRatings(r, name, &idColumn{what: "user", given: true, ids: users}, &idColumn{what: "item", given: true, ids: items})
}

func parseRatings(r io.Reader, name string, users, items *idColumn) (*Ratings, error) {
	rs := &Ratings{}
	first := true
	// netflix: the file is the Netflix Prize's, whose lines are
	// "user,rating,date" after an "item:" line.
	var netflix bool
	var item []byte // the current item line's id (a copy: lines are reused)
	var fields [5][]byte
	err := eachLine(r, name, func(line []byte) string {
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
		n, reason := splitFields(line, &fields)
		if reason != "" {
			return reason
		}
		if n == 0 {
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
		f := fields[:n]
		u, reason := users.number(f[0], &rs.Users)
		if reason != "" {
			return reason
		}
		i, reason := items.number(f[1], &rs.Items)
		if reason != "" {
			return reason
		}
		v, reason := parseRating(f)
		if reason != "" {
			return reason
		}
		rs.Users = append(rs.Users, u)
		rs.Items = append(rs.Items, i)
		rs.Values = append(rs.Values, v)
		return ""
	})
	if err != nil {
		return nil, err
	}
	rs.UserIDs, rs.NumUsers = users.finish(rs.Users)
	rs.ItemIDs, rs.NumItems = items.finish(rs.Items)
	return rs, nil
}

// idColumn numbers the ids of one column of a ratings file: as given
// while they are numbers, else by a dictionary.
type idColumn struct {
	what string // "user" or "item", for messages
	// given: ids is another file's numbering (nil: numbers), which this
	// file's ids are looked up in, not added to.
	given bool
	// ids is nil while every id of the column is a number kept as given
	// (and, while building, written in canonical form, so that the
	// numbers read so far give back their text if a later id is not one).
	ids *IDs
	// notNumber: an id added to ids while building is not a number.
	notNumber bool
	buf       []byte
}

// number returns the number of id b, the column's rows so far being
// *rows (renumbered when the column turns out not to hold numbers).
func (c *idColumn) number(b []byte, rows *[]uint32) (uint32, string) {
	if c.given {
		if c.ids == nil {
			v, reason := parseID(c.what, b)
			if reason != "" {
				reason += fmt.Sprintf(" (the training data's %s ids are all numbers)", c.what)
			}
			return v, reason
		}
		if reason := c.checkText(b); reason != "" {
			return 0, reason
		}
		if n, ok := c.ids.Lookup(b); ok {
			return n, ""
		}
		return Unseen, ""
	}
	v, ok, _ := parseUint(b, math.MaxUint32)
	if c.ids == nil {
		if ok && (len(b) == 1 || b[0] != '0') {
			return uint32(v), ""
		}
		if reason := c.checkText(b); reason != "" {
			return 0, reason
		}
		// The first id that is not a number in canonical form: number
		// the ids so far by their text, in the order they came.
		c.ids = &IDs{}
		for i, v := range *rows {
			c.buf = strconv.AppendUint(c.buf[:0], uint64(v), 10)
			(*rows)[i], _ = c.ids.Add(c.buf)
		}
	} else if reason := c.checkText(b); reason != "" {
		return 0, reason
	}
	c.notNumber = c.notNumber || !ok
	n, fits := c.ids.Add(b)
	if !fits {
		return 0, fmt.Sprintf("the distinct %s ids pass 4 GiB", c.what)
	}
	return n, ""
}

// checkText returns why b cannot be an id: ids are written to exported
// models as TSV.
func (c *idColumn) checkText(b []byte) string {
	if len(b) == 0 {
		return fmt.Sprintf("empty %s id", c.what)
	}
	for _, ch := range b {
		if ch < ' ' || ch == 0x7f {
			return fmt.Sprintf("%s id %s holds a control character", c.what, quote(b))
		}
	}
	return ""
}

// finish returns the column's dictionary (nil when its ids are numbers
// kept as given) and its count of numbers, the largest plus one.
func (c *idColumn) finish(rows []uint32) (*IDs, int) {
	if c.ids != nil && !c.given && !c.notNumber {
		// Numbers after all, some with leading zeros ("007"): kept as
		// given, as every column of numbers is.
		vals := make([]uint32, c.ids.Len())
		for n := range vals {
			v, _, _ := parseUint(c.ids.bytes(uint32(n)), math.MaxUint32)
			vals[n] = uint32(v)
		}
		for i, n := range rows {
			rows[i] = vals[n]
		}
		c.ids = nil
	}
	if c.ids != nil {
		if !c.given {
			c.ids.trim()
		}
		return c.ids, c.ids.Len()
	}
	num := 0
	for _, v := range rows {
		num = max(num, int(v)+1)
	}
	return nil, num
}

var doubleColon = []byte("::")

// splitFields stores up to len(f) fields of line in f and returns how many
// fields the line has in all (possibly more than len(f)), or why it
// cannot be split. Empty fields count only between separators, where they
// are an error the caller reports. A quoted field is unquoted in place.
func splitFields(line []byte, f *[5][]byte) (int, string) {
	sep := separator(line)
	if sep == nil {
		n := 0
		for {
			var tok []byte
			tok, line = field(line)
			if len(tok) == 0 {
				return n, ""
			}
			if n < len(f) {
				if k := len(tok); k >= 2 && tok[0] == '"' && tok[k-1] == '"' {
					tok = tok[1 : k-1]
				}
				f[n] = tok
			}
			n++
		}
	}
	for n := 0; ; n++ {
		tok, rest, reason := nextField(line, sep)
		if reason != "" {
			return 0, fmt.Sprintf("field %d: %s", n+1, reason)
		}
		if n < len(f) {
			f[n] = tok
		}
		if rest == nil {
			return n + 1, ""
		}
		line = rest
	}
}

// separator returns the first of "::", ";" and "," that line holds
// outside double quotes, or nil when it holds none (fields are then
// separated by white space).
func separator(line []byte) []byte {
	quoted := false
	for i, c := range line {
		switch {
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == ':' && i+1 < len(line) && line[i+1] == ':':
			return doubleColon
		case c == ';' || c == ',':
			return line[i : i+1]
		}
	}
	return nil
}

// nextField splits the first field off line, whose fields are separated
// by sep; rest is nil after the last field. The field is trimmed of
// spaces and, if quoted, unquoted in place.
func nextField(line, sep []byte) (tok, rest []byte, reason string) {
	line = trimLeft(line)
	if len(line) == 0 || line[0] != '"' {
		if i := bytes.Index(line, sep); i >= 0 {
			return trimSpace(line[:i]), line[i+len(sep):], ""
		}
		return trimSpace(line), nil, ""
	}
	// A quoted field: up to the quote that is not doubled.
	w := 0 // unquoted bytes written back at line[1:]
	for i := 1; i < len(line); i++ {
		c := line[i]
		if c == '"' {
			if i+1 < len(line) && line[i+1] == '"' {
				i++
			} else {
				after := trimLeft(line[i+1:])
				switch {
				case len(after) == 0:
					return line[1 : 1+w], nil, ""
				case bytes.HasPrefix(after, sep):
					return line[1 : 1+w], after[len(sep):], ""
				}
				if j := bytes.Index(after, sep); j >= 0 {
					after = after[:j]
				}
				return nil, nil, fmt.Sprintf("text %s after a closing quote", quote(trimSpace(after)))
			}
		}
		line[1+w] = c
		w++
	}
	return nil, nil, "a quote that is not closed"
}

// parseRating parses the rating and timestamp of the 3 or 4 fields of a
// rating line.
func parseRating(f [][]byte) (v float32, reason string) {
	if v, reason = parseFloat32(f[2]); reason != "" {
		return 0, fmt.Sprintf("rating %s %s", quote(f[2]), reason)
	}
	if len(f) == 4 {
		if _, ok, _ := parseUint(f[3], math.MaxInt64); !ok && !isDate(f[3]) {
			return 0, fmt.Sprintf("timestamp %s is neither a non-negative integer nor a date (YYYY-MM-DD)", quote(f[3]))
		}
	}
	return v, ""
}

// isDate reports whether b is a date YYYY-MM-DD, as the Netflix Prize's
// files give the day of each rating, or a date and time of day
// (Yelp's "2018-07-07 22:09:11", ISO 8601's "2018-07-07T22:09:11Z").
func isDate(b []byte) bool {
	if len(b) < 10 || b[4] != '-' || b[7] != '-' {
		return false
	}
	for i, c := range b[:10] {
		if i != 4 && i != 7 && (c < '0' || c > '9') {
			return false
		}
	}
	if len(b) == 10 {
		return true
	}
	if b[10] != ' ' && b[10] != 'T' {
		return false
	}
	for _, c := range b[11:] {
		if !(c >= '0' && c <= '9' || c == ':' || c == '.' || c == 'Z' || c == '+' || c == '-') {
			return false
		}
	}
	return len(b) > 11
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

// trimLeft drops the leading separators of isSpace from b.
func trimLeft(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	return b
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
