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
// follows. While the cluster ends with its job (Shutdown), a SIGTERM ends
// the server at once: it exits by itself anyway, and nothing is moved.
// After a job on a cluster that stays up, a SIGTERM drains as during one
// (the model stays for export), but the coordinator may be gone: the
// drain then does not wait for it. Before the job's first table (a
// cluster forming, or waiting for a job) the servers hold nothing, so the
// last of them may leave at once too.
type jobEnd struct{ done, shutdown, noTables atomic.Bool }

// see records l, and reports whether the cluster ends with the job.
func (e *jobEnd) see(l *layout.Layout) bool {
	e.done.Store(l.JobDone) // a cluster that stays up may start its next job
	e.shutdown.Store(l.JobDone && l.Shutdown)
	e.noTables.Store(len(l.Tables) == 0)
	return l.JobDone && l.Shutdown
}
