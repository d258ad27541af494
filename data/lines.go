package data

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
)

const bufSize = 64 << 10

// lineReader yields the lines of a plain or gzip-compressed stream. It
// detects gzip by its magic bytes because names lie: LIBSVM files are
// routinely gzipped without a .gz suffix and vice versa.
type lineReader struct {
	br   *bufio.Reader
	name string
	line int    // number of the line last returned
	long []byte // holds a line longer than br's buffer
}

// readFile opens path and parses it with parse, which names its errors
// after path.
func readFile[T any](path string, parse func(io.Reader, string) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	return parse(f, path)
}

func newLineReader(r io.Reader, name string) (*lineReader, error) {
	br, err := maybeGunzip(r, name)
	if err != nil {
		return nil, err
	}
	// Windows tools (Notepad, Excel's "CSV UTF-8") start text with a
	// UTF-8 byte order mark, which would stick to the first field and
	// make the first line malformed.
	if b, err := br.Peek(len(utf8BOM)); err == nil && string(b) == utf8BOM {
		br.Discard(len(utf8BOM))
	}
	if magic, err := br.Peek(3); err == nil && magic[0] == 0 && magic[1] == 0 && magic[2] == 8 {
		// MNIST's images given to lr, lasso or mf read as one line whose
		// label was 40 bytes of binary "not a number".
		return nil, idxError(name, "an IDX file (MNIST's binary format), not lines of text: --app mlr and nn read MNIST", nil)
	}
	return &lineReader{br: br, name: name}, nil
}

const utf8BOM = "\xef\xbb\xbf"

// maybeGunzip buffers r, decompressing it if it starts with gzip's magic
// bytes. Fewer than two bytes (an empty input) is simply not gzip; a real
// read error will surface again at the first read.
func maybeGunzip(r io.Reader, name string) (*bufio.Reader, error) {
	br := bufio.NewReaderSize(r, bufSize)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, &LineError{File: name, Reason: "bad gzip header: " + err.Error(), Err: err}
		}
		br = bufio.NewReaderSize(zr, bufSize)
	}
	return br, nil
}

// eachLine calls fn with every line of r (plain or gzip-compressed, named
// name in errors), until the end of input or the first line fn finds
// malformed: fn returns the reason, which becomes a *LineError naming the
// file and line. The slice is valid only during the call.
func eachLine(r io.Reader, name string, fn func(line []byte) (reason string)) error {
	lr, err := newLineReader(r, name)
	if err != nil {
		return err
	}
	for {
		line, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if reason := fn(line); reason != "" {
			return &LineError{File: name, Line: lr.line, Reason: reason}
		}
	}
}

// next returns the next line without its '\n'. The slice is valid until the
// following call. At the end of input it returns io.EOF.
func (lr *lineReader) next() ([]byte, error) {
	b, err := lr.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		lr.long = append(lr.long[:0], b...)
		for err == bufio.ErrBufferFull {
			b, err = lr.br.ReadSlice('\n')
			lr.long = append(lr.long, b...)
		}
		b = lr.long
	}
	if err != nil && (err != io.EOF || len(b) == 0) {
		if err == io.EOF {
			return nil, io.EOF
		}
		lr.line++
		return nil, lr.readError(err)
	}
	lr.line++
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return b, nil
}

// readError classifies a failure to read line lr.line: damaged compressed
// data is the file's fault (ErrMalformed), anything else is an I/O error.
func (lr *lineReader) readError(err error) error {
	var corrupt flate.CorruptInputError
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum) ||
		errors.Is(err, gzip.ErrHeader) || errors.As(err, &corrupt) {
		return &LineError{File: lr.name, Line: lr.line, Reason: "truncated or corrupt input: " + err.Error(), Err: err}
	}
	return fmt.Errorf("%s:%d: read: %w", lr.name, lr.line, err)
}

// isSpace reports whether c separates fields. \r counts so that CRLF line
// endings, and stray CRs from copy-paste, never stick to a number.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// field splits off the first whitespace-separated field of b; tok is empty
// when b holds only whitespace.
func field(b []byte) (tok, rest []byte) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}
