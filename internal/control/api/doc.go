// Package api is the control-plane contract: the requests workers and
// servers make of the coordinator, its replies and its errors, and the
// HTTP client that carries them.
//
// Every error the coordinator returns travels as a stable code (Code) in
// its JSON reply, and the client turns the code back into the sentinel,
// so that callers test errors with errors.Is on either side of the wire.
package api
