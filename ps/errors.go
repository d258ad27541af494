package ps

import (
	"errors"
	"fmt"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// Errors callers can test with errors.Is.
var (
	// ErrTimeout wraps the context's error when Wait reaches its deadline.
	ErrTimeout = errors.New("ps: wait timed out")
	// ErrStaleEpoch: the servers kept refusing this client's range map.
	ErrStaleEpoch = errors.New("ps: stale range map epoch")
	// ErrNonFinite: servers refused more non-finite updates than the
	// table's limit allows; training has diverged.
	ErrNonFinite = errors.New("ps: too many updates refused as non-finite")
	// ErrServer: a server refused a request it found malformed.
	ErrServer = errors.New("ps: server error")
	// ErrBadArgument: the call's arguments are inconsistent (unsorted keys,
	// wrong value length); nothing was sent.
	ErrBadArgument = errors.New("ps: bad argument")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("ps: client closed")
	// ErrNoTable: no table has that name.
	ErrNoTable = errors.New("ps: no such table")
	// ErrNoServer: no server of the cluster's layout answered a dial.
	ErrNoServer = errors.New("ps: no server of the layout reachable")
)

// ServerError is a server's refusal of a request.
type ServerError struct {
	Server string
	Code   wire.Code
	Msg    string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("ps: server %s refused request (code %d): %s", e.Server, e.Code, e.Msg)
}

func (e *ServerError) Unwrap() error {
	if e.Code == wire.CodeStaleEpoch {
		return ErrStaleEpoch
	}
	return ErrServer
}
