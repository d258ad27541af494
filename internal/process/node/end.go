package node

import (
	"errors"
	"sync/atomic"

	"github.com/terrace-ml/terrace/internal/placement/layout"
)

// errClusterDone ends a server whose coordinator published the end of
// the job with Shutdown (--exit-when-done): the server exits 0.
var errClusterDone = errors.New("the cluster's job is done")

// jobEnd is what a server knows of its job's end, from the layouts it
// follows: while the job is done, a SIGTERM ends the server at once (no
// handoff: the coordinator may be gone, and the last server may leave).
type jobEnd struct{ done atomic.Bool }

// see records l, and reports whether the cluster ends with the job.
func (e *jobEnd) see(l *layout.Layout) bool {
	e.done.Store(l.JobDone) // a cluster that stays up may start its next job
	return l.JobDone && l.Shutdown
}
