package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/terrace-ml/terrace/table"
)

// Errors of the control plane, which callers test with errors.Is.
var (
	// ErrBadRequest: the request is malformed or names what does not
	// exist (a rank out of range, an unknown role).
	ErrBadRequest = errors.New("coordinator: bad request")
	// ErrNothingToCheckpoint: a checkpoint was asked for where no server
	// holds anything to write (the job has no tables yet, or the last
	// server left after the job with the model). It wraps ErrBadRequest.
	ErrNothingToCheckpoint = fmt.Errorf("%w: nothing to checkpoint", ErrBadRequest)
	// ErrFull: the cluster already has every node it waits for.
	ErrFull = errors.New("coordinator: cluster already has every node it expects")
	// ErrTableConflict: a different table of that name exists.
	ErrTableConflict = errors.New("coordinator: a different table of that name exists")
	// ErrLeaseLost: the worker no longer holds the piece it reports on (it
	// was declared dead, and another worker may be training it), or asks
	// for a state version that is no longer current.
	ErrLeaseLost = errors.New("coordinator: lease lost")
	// ErrDeclaredDead: the worker's rank was declared dead (silent for
	// the failure timeout: a paused or starved process, or one cut off)
	// or had left; its leases went to others. It wraps ErrLeaseLost. The
	// process may join again, under a new incarnation, as a new worker.
	ErrDeclaredDead = fmt.Errorf("%w: worker declared dead", ErrLeaseLost)
	// ErrRewound: the cluster went back to a checkpoint after slots lost
	// every copy (coordinator --on-copies-lost resume), revoking every
	// lease granted before: the worker drops its lease and asks for work
	// again. It wraps ErrLeaseLost.
	ErrRewound = fmt.Errorf("%w: the cluster went back to a checkpoint", ErrLeaseLost)
	// ErrNoSplit: the piece asked for cannot be split now (no live worker
	// holds it, another split of it is pending, its holder declined, died,
	// drained or did not answer within the failure timeout).
	ErrNoSplit = errors.New("coordinator: no split")
	// ErrNoState: the store holds no such partition state version.
	ErrNoState = errors.New("coordinator: no such partition state")
	// ErrStateTooLarge: a partition state blob is over MaxStateBytes.
	ErrStateTooLarge = errors.New("coordinator: partition state too large")
	// ErrNotPersisted: the coordinator could not save a change; it answers
	// nothing more, and clients go to the replica that leads next.
	ErrNotPersisted = errors.New("coordinator: state not persisted")
	// ErrNotLeader: this coordinator no longer leads (another replica
	// won the election); clients go to the one that does.
	ErrNotLeader = errors.New("coordinator: not the leader")
	// ErrUnauthenticated: the request carries no join token, or one the
	// coordinator does not know.
	ErrUnauthenticated = errors.New("coordinator: no valid join token")
	// ErrForbidden: the request's token does not grant the role the
	// request needs (a worker's token asking to join as a server, a read
	// token asking for a checkpoint).
	ErrForbidden = errors.New("coordinator: token does not grant this role")
	// ErrJobConflict: a different job was submitted to the cluster before.
	ErrJobConflict = errors.New("coordinator: the cluster runs another job")
	// ErrLastServer: the last server on the ring asked to leave; its
	// slots would have nowhere to go.
	ErrLastServer = errors.New("coordinator: the last server on the ring cannot leave")
	// ErrTLSMismatch: this client and every coordinator disagree on TLS
	// (one end does not speak it, or a certificate is another CA's,
	// expired, or does not name the address dialled); found on the client
	// side, it has no code.
	ErrTLSMismatch = errors.New("coordinator: TLS does not match this node's")
	// ErrUnavailable: no coordinator answered within the client's retry
	// time.
	ErrUnavailable = errors.New("coordinator unreachable")
)

// Code names an error in the coordinator's JSON replies. Codes are
// stable: a client maps them back to the sentinels above, never by
// reading messages.
type Code string

// The codes, one per sentinel; CodeInternal is any other failure.
const (
	CodeBadRequest    Code = "bad_request"
	CodeNothingToCkpt Code = "nothing_to_checkpoint"
	CodeInvalidTable  Code = "invalid_table" // table.ErrInvalid
	CodeFull          Code = "full"
	CodeTableConflict Code = "table_conflict"
	CodeLeaseLost     Code = "lease_lost"
	CodeDeclaredDead  Code = "declared_dead"
	CodeRewound       Code = "rewound"
	CodeNoSplit       Code = "no_split"
	CodeNoState       Code = "no_state"
	CodeStateTooLarge Code = "state_too_large"
	CodeNotPersisted  Code = "not_persisted"
	CodeNotLeader     Code = "not_leader"
	CodeJobConflict   Code = "job_conflict"
	CodeLastServer    Code = "last_server"
	CodeInternal      Code = "internal"
)

// The codes of the join tokens' refusals (see docs/design/security.md).
const (
	CodeUnauthenticated Code = "unauthenticated"
	CodeForbidden       Code = "forbidden"
)

// codes lists each code with its sentinel and HTTP status, most specific
// first: an error wrapping two sentinels takes the first code listed.
var codes = []struct {
	code   Code
	err    error
	status int
}{
	{CodeNotLeader, ErrNotLeader, http.StatusServiceUnavailable},
	{CodeNotPersisted, ErrNotPersisted, http.StatusServiceUnavailable},
	{CodeInvalidTable, table.ErrInvalid, http.StatusBadRequest},
	{CodeStateTooLarge, ErrStateTooLarge, http.StatusRequestEntityTooLarge},
	{CodeNothingToCkpt, ErrNothingToCheckpoint, http.StatusConflict}, // before ErrBadRequest, which it wraps
	{CodeBadRequest, ErrBadRequest, http.StatusBadRequest},
	{CodeFull, ErrFull, http.StatusConflict},
	{CodeTableConflict, ErrTableConflict, http.StatusConflict},
	{CodeDeclaredDead, ErrDeclaredDead, http.StatusConflict}, // before ErrLeaseLost, which it wraps
	{CodeRewound, ErrRewound, http.StatusConflict},           // before ErrLeaseLost, which it wraps
	{CodeLeaseLost, ErrLeaseLost, http.StatusConflict},
	{CodeNoSplit, ErrNoSplit, http.StatusConflict},
	{CodeNoState, ErrNoState, http.StatusNotFound},
	{CodeUnauthenticated, ErrUnauthenticated, http.StatusUnauthorized},
	{CodeForbidden, ErrForbidden, http.StatusForbidden},
	{CodeJobConflict, ErrJobConflict, http.StatusConflict},
	{CodeLastServer, ErrLastServer, http.StatusConflict},
}

// CodeOf returns the code of err (CodeInternal if it wraps no sentinel).
func CodeOf(err error) Code {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return CodeInternal
}

// Err returns the sentinel of code c (nil for CodeInternal and unknown
// codes).
func (c Code) Err() error {
	for _, k := range codes {
		if k.code == c {
			return k.err
		}
	}
	return nil
}

// Status is the HTTP status a reply with code c carries.
func (c Code) Status() int {
	for _, k := range codes {
		if k.code == c {
			return k.status
		}
	}
	return http.StatusInternalServerError
}

// Transient reports whether another coordinator replica, or the same one
// a moment later, may answer a request refused with code c.
func (c Code) Transient() bool { return c.Status() == http.StatusServiceUnavailable }

// ErrorReply is the body of every reply that is not 200 OK.
type ErrorReply struct {
	Code  Code   `json:"code"`
	Error string `json:"error"`
}
