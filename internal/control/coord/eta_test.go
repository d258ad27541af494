package coord

import (
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestETAs: the pass's ETA counts the partitions it has left, the job's
// also every pass after it; unknown rates, passes or progress give 0.
func TestETAs(t *testing.T) {
	// Pass 2 (the third) of 10, 3 of 8 partitions done: 19 partitions
	// trained of 100 rows each, at 100 rows/s.
	p := api.Progress{Pass: 2, Partitions: 8, Done: 3, Examples: 1900, Rate: 100}
	for _, tc := range []struct {
		name      string
		p         api.Progress
		passes    int
		pass, job time.Duration
	}{
		{"mid-job", p, 10, 5 * time.Second, (5 + 7*8) * time.Second},
		{"last pass", p, 3, 5 * time.Second, 5 * time.Second},
		{"passes unknown", p, 0, 5 * time.Second, 0},
		{"no rate yet", api.Progress{Pass: 2, Partitions: 8, Done: 3, Examples: 1900}, 10, 0, 0},
		{"no partition done yet", api.Progress{Pass: 0, Partitions: 8, Examples: 50, Rate: 100}, 10, 0, 0},
	} {
		pass, job := etas(tc.p, tc.passes)
		if pass != tc.pass || job != tc.job {
			t.Errorf("%s: pass %v job %v, want %v and %v", tc.name, pass, job, tc.pass, tc.job)
		}
	}
}
