package evict

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// DefaultFilePoll is how often File looks for its file when Poll is zero.
const DefaultFilePoll = 200 * time.Millisecond

// maxFileRead bounds how much of the notice file is read: a deadline is
// one line.
const maxFileRead = 4 << 10

// File is a notice that a file appeared at Path: whatever learns of the
// eviction (a node agent, a drill script, an operator) creates it. If its
// content is an RFC 3339 time, that is the deadline; otherwise the notice
// has none and Merge gives it the grace period.
//
// A file that is already there when Watch starts is a notice at once; the
// node removes a stale one before it starts watching. Writers that put a
// deadline in the file should write it to a temporary name and rename it,
// so the file never appears half written; an empty file is read once more
// on the next poll for writers that create first and write after.
type File struct {
	Path string
	Poll time.Duration // default DefaultFilePoll
}

// Watch implements Source.
func (f File) Watch(ctx context.Context, out chan<- Notice) error {
	if f.Path == "" {
		return fmt.Errorf("%w: file: empty path", ErrBadConfig)
	}
	sawEmpty := false
	poll(ctx, orDefault(f.Poll, DefaultFilePoll), func(context.Context) (Notice, bool) {
		// Only something that exists at Path is a notice: a Stat error
		// (not there yet, a parent not searchable) is retried.
		if _, err := os.Stat(f.Path); err != nil {
			return Notice{}, false
		}
		// A read error (Path is a directory, unreadable) still leaves a
		// notice, only without a deadline.
		content, err := readHead(f.Path)
		if err == nil && content == "" && !sawEmpty {
			sawEmpty = true
			return Notice{}, false
		}
		n := Notice{Source: "file", Detail: "file " + f.Path + " appeared"}
		if t, perr := time.Parse(time.RFC3339, content); perr == nil {
			n.Deadline = t
			n.Detail += " with deadline " + content
		}
		return n, true
	}, out)
	return nil
}

// readHead returns the trimmed first maxFileRead bytes of the file.
func readHead(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxFileRead))
	return strings.TrimSpace(string(b)), err
}
