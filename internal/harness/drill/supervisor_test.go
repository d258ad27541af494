//go:build unix

package drill

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func shell(t *testing.T) string {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	return sh
}

// TestSupervisorLogsLinesAndKills starts a child, sees its marked line and
// its log, and checks that close kills it.
func TestSupervisorLogsLinesAndKills(t *testing.T) {
	dir := t.TempDir()
	s := newSupervisor(shell(t), dir, func(_ *proc, text string) bool { return strings.HasPrefix(text, "mark") })
	p, err := s.start("child", Worker, "-c", "echo hello; echo mark one; exec sleep 300")
	if err != nil {
		s.close()
		t.Fatal(err)
	}
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	select {
	case l := <-s.lines:
		if l.p != p || l.text != "mark one" {
			t.Errorf("line %q from %s", l.text, l.p.name)
		}
	case <-timeout.C:
		t.Error("no marked line")
	}
	s.close()
	if !p.done() || p.waitErr == nil || !strings.Contains(p.waitErr.Error(), "killed") {
		t.Errorf("after close: done %v, %v", p.done(), p.waitErr)
	}
	b, err := os.ReadFile(p.log)
	if err != nil || !strings.Contains(string(b), "hello\nmark one\n") {
		t.Errorf("log %q, %v", b, err)
	}
}
