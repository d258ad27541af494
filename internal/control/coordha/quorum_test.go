package coordha

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestQuorumLostIsSaid: a replica whose etcd lost its quorum (the other
// two of three stopped) was silent; it says so once, with what it means,
// and once again when the quorum is back. A single slow probe is not a
// loss.
func TestQuorumLostIsSaid(t *testing.T) {
	var log bytes.Buffer
	q := &quorumWatch{log: slog.New(slog.NewTextHandler(&log, nil)), back: "2 of the 3 coordinators are up again"}
	t0 := time.Unix(1000, 0)
	down := errors.New("context deadline exceeded")
	for i, err := range []error{nil, down, nil, down, down, down, down, nil, nil} {
		q.observe(t0.Add(time.Duration(i)*time.Second), err)
	}
	out := log.String()
	if n := strings.Count(out, "etcd lost its quorum"); n != 1 {
		t.Errorf("loss said %d times, want once:\n%s", n, out)
	}
	for _, want := range []string{"no coordinator can be elected", "2 of the 3 coordinators are up again", "context deadline exceeded"} {
		if !strings.Contains(out, want) {
			t.Errorf("the loss does not say %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "etcd has its quorum again"); n != 1 {
		t.Errorf("return said %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "lost_for=4s") {
		t.Errorf("the return does not say how long the quorum was lost (from the first failed probe):\n%s", out)
	}
}
