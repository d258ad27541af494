package node

import (
	"log/slog"
	"time"
)

// unreachable says, at once and then every few seconds, that the
// coordinator does not answer, and for how long the node keeps trying:
// a node that waited in silence looked hung.
func unreachable(log *slog.Logger, timeout time.Duration) func(string, error) {
	return func(addrs string, err error) {
		log.Warn("coordinator unreachable; retrying", "coordinator", addrs, "gives_up_after", timeout, "err", err)
	}
}
