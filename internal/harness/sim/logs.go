package sim

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// lineLog keeps the last lines the nodes logged.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	next  int
}

const keepLines = 400

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := strings.TrimRight(string(p), "\n")
	if len(l.lines) < keepLines {
		l.lines = append(l.lines, line)
	} else {
		l.lines[l.next] = line
	}
	l.next = (l.next + 1) % keepLines
	return len(p), nil
}

// last returns up to n of the newest lines, oldest first.
func (l *lineLog) last(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := slices.Clone(l.lines)
	if len(l.lines) == keepLines {
		all = append(slices.Clone(l.lines[l.next:]), l.lines[:l.next]...)
	}
	return all[max(0, len(all)-n):]
}

// dumpStacks writes the stacks of the calling synctest bubble's
// goroutines to a file named after seed, and returns its name.
func dumpStacks(seed uint64) string {
	self := make([]byte, 256)
	self = self[:runtime.Stack(self, false)]
	i := bytes.Index(self, []byte("synctest bubble "))
	if i < 0 {
		return "(none: not in a bubble)"
	}
	tag := self[i : i+bytes.IndexByte(self[i:], ']')+1] // "synctest bubble N]"
	all := make([]byte, 32<<20)
	all = all[:runtime.Stack(all, true)]
	var out bytes.Buffer
	for _, g := range bytes.Split(all, []byte("\n\n")) {
		if first, _, _ := bytes.Cut(g, []byte("\n")); bytes.Contains(first, tag) {
			out.Write(g)
			out.WriteString("\n\n")
		}
	}
	name := filepath.Join(os.TempDir(), fmt.Sprintf("terrace-sim-seed-%d.stacks", seed))
	if err := os.WriteFile(name, out.Bytes(), 0o644); err != nil {
		return fmt.Sprintf("(not written: %v)", err)
	}
	return name
}
