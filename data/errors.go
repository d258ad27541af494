package data

import (
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every error that reports bad input data, as
// opposed to a failure to read it; test for it with errors.Is.
var ErrMalformed = errors.New("malformed data")

// ErrNoRows is wrapped by the apps' errors for a data file that holds no
// rows: only blank lines, comments or a header, or a gzip stream of
// nothing. The readers return an empty result for such input, a valid
// value; an app has nothing to train on or evaluate, and says so before
// it trains nothing or scores NaN.
var ErrNoRows = errors.New("no data rows (only blank lines, comments or a header)")

// CheckRows returns an error wrapping ErrNoRows, naming path, when rows is
// 0.
func CheckRows(path string, rows int) error {
	if rows == 0 {
		return fmt.Errorf("%s: %w", path, ErrNoRows)
	}
	return nil
}

// LineError reports a malformed line of an input file. It wraps ErrMalformed
// and, when the line could not be read at all (a truncated or corrupt gzip
// stream), the underlying error Err.
type LineError struct {
	File string // the name given to the parser, usually the path
	// Line is 1-based; 0 means the error is not tied to a line, such as a
	// bad gzip header.
	Line   int
	Reason string
	Err    error
}

func (e *LineError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
}

// Unwrap lets errors.Is match both ErrMalformed and the cause.
func (e *LineError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrMalformed, e.Err}
	}
	return []error{ErrMalformed}
}

// quote renders a token for an error message, clipped so that one absurd
// token cannot blow up a log line.
func quote(b []byte) string {
	const max = 40
	if len(b) > max {
		return fmt.Sprintf("%q...", b[:max])
	}
	return fmt.Sprintf("%q", b)
}
