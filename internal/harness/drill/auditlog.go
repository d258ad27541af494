package drill

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrBadAuditLog is wrapped by errors of ReadAuditLog for files that are
// not audit logs (a torn last line is not an error).
var ErrBadAuditLog = errors.New("drill: bad audit log")

// DefaultAuditEvery is how many acknowledged pushes an AuditLog holds
// before it appends them to its file.
const DefaultAuditEvery = 16

const auditHeader = "terrace-audit v1 rank="

// AuditLog is a worker's append-only record of its acknowledged audit
// pushes (StartAudit): one line per acknowledgement with the
// running count and the time the worker saw it.
//
// Records are appended to the file every Every records (the first one at
// once), and Close appends the rest, an end line, and fsyncs. A worker
// killed with SIGKILL therefore leaves a file that lacks at most Every-1
// of the acknowledgements it had seen: the page cache keeps what was
// written, only the worker's buffer is lost. (A machine crash can lose
// more, up to everything since the last fsync; the drill kills processes,
// not machines.)
//
// The file is created at the first record, when the worker's rank is
// known. An AuditLog is safe for concurrent use.
type AuditLog struct {
	path  string
	every int

	mu     sync.Mutex
	f      *os.File
	buf    []byte
	held   int
	acked  int64
	closed bool
}

// NewAuditLog returns a log that will write to path; every < 1 means
// DefaultAuditEvery.
func NewAuditLog(path string, every int) *AuditLog {
	if every < 1 {
		every = DefaultAuditEvery
	}
	return &AuditLog{path: path, every: every}
}

// Record notes that the worker of rank saw its acked-th audit push
// acknowledged at at.
func (l *AuditLog) Record(rank int, acked int64, at time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("drill: audit log %s: record after close", l.path)
	}
	if l.f == nil {
		f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("drill: audit log: %w", err)
		}
		l.f = f
		l.buf = fmt.Appendf(l.buf, "%s%d\n", auditHeader, rank)
		l.held = l.every - 1 // the first record goes out at once
	}
	l.buf = fmt.Appendf(l.buf, "a %d %d\n", acked, at.UnixNano())
	l.acked = acked
	l.held++
	if l.held >= l.every {
		return l.flush()
	}
	return nil
}

func (l *AuditLog) flush() error {
	if len(l.buf) == 0 {
		return nil
	}
	_, err := l.f.Write(l.buf)
	l.buf, l.held = l.buf[:0], 0
	if err != nil {
		return fmt.Errorf("drill: audit log: %w", err)
	}
	return nil
}

// Close appends what is held and an end line, and syncs the file to disk.
// A log that never recorded anything leaves no file.
func (l *AuditLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.f == nil {
		l.closed = true
		return nil
	}
	l.closed = true
	l.buf = fmt.Appendf(l.buf, "end %d\n", l.acked)
	err := l.flush()
	if serr := l.f.Sync(); err == nil && serr != nil {
		err = fmt.Errorf("drill: audit log: %w", serr)
	}
	if cerr := l.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("drill: audit log: %w", cerr)
	}
	return err
}

// WorkerLog is what ReadAuditLog found in one worker's audit log.
type WorkerLog struct {
	Rank int
	// Acked is the last count recorded.
	Acked int64
	// Times are when the worker saw each recorded acknowledgement, in
	// Unix nanoseconds.
	Times []int64
	// Complete is whether the log has its end line: the worker closed it
	// rather than being killed.
	Complete bool
}

// ReadAuditLog reads a log that AuditLog wrote. A last line without its
// newline (the writer was killed in the middle of a write) is ignored.
func ReadAuditLog(path string) (*WorkerLog, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("drill: audit log: %w", err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i < len(b)-1 {
		b = b[:i+1] // torn tail
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	w := &WorkerLog{Rank: -1}
	line := 0
	bad := func(why string) error {
		return fmt.Errorf("%w: %s:%d: %s", ErrBadAuditLog, path, line, why)
	}
	for sc.Scan() {
		line++
		s := sc.Text()
		if line == 1 {
			r, ok := strings.CutPrefix(s, auditHeader)
			n, err := strconv.Atoi(r)
			if !ok || err != nil || n < 0 {
				return nil, bad("no header")
			}
			w.Rank = n
			continue
		}
		f := strings.Fields(s)
		switch {
		case len(f) == 3 && f[0] == "a":
			n, err1 := strconv.ParseInt(f[1], 10, 64)
			at, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 != nil || err2 != nil || n != w.Acked+1 {
				return nil, bad(fmt.Sprintf("bad record %q after count %d", s, w.Acked))
			}
			w.Acked = n
			w.Times = append(w.Times, at)
		case len(f) == 2 && f[0] == "end":
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || n != w.Acked {
				return nil, bad(fmt.Sprintf("end line %q after count %d", s, w.Acked))
			}
			w.Complete = true
		default:
			return nil, bad(fmt.Sprintf("unknown line %q", s))
		}
	}
	if line == 0 {
		return nil, bad("empty")
	}
	return w, nil
}
