package api

import "time"

// MaxReportBytes is the largest final report a worker may send: an app's
// report lists every pass it evaluated, about 150 bytes each, and 1 MiB
// (the limit before) refused the report of a job of 7,000 passes at its
// very end.
const MaxReportBytes = 16 << 20

// The coordinator's HTTP routes (method and path, as net/http patterns).
// Request and reply bodies are the JSON of this package's types; a reply
// that is not 200 OK carries an ErrorReply.
const (
	RouteLayout       = "GET /v1/layout"  // ?after=V: long-poll for a layout newer than version V
	RouteJoin         = "POST /v1/join"   // Join -> Joined
	RouteTables       = "POST /v1/tables" // table.Spec -> layout
	RouteReport       = "POST /v1/report" // ?rank=R: a worker's final report (any JSON)
	RouteReports      = "GET /v1/reports" // the reports received, by rank
	RouteHeartbeat    = "POST /v1/heartbeat"
	RouteLeave        = "POST /v1/leave" // Rank: a worker's drained departure
	RouteAcquire      = "POST /v1/work/acquire"
	RouteProgress     = "POST /v1/work/progress"
	RouteSplit        = "POST /v1/work/split"
	RouteState        = "GET /v1/work/state" // ?partition=P&version=V -> the blob
	RouteServerLeave  = "POST /v1/servers/leave"
	RouteSynced       = "POST /v1/servers/synced"
	RouteRebuilt      = "POST /v1/servers/rebuilt"
	RouteCheckpointed = "POST /v1/servers/checkpointed"
	RouteRestored     = "POST /v1/servers/restored"
	RouteCheckpoint   = "POST /v1/checkpoint" // take a checkpoint at the next pass boundary (?now=true: inside the pass)
	RouteHealth       = "GET /healthz"
	RouteJob          = "POST /v1/job"        // Job -> the Job in force
	RouteJobStatus    = "GET /v1/job"         // -> JobStatus
	RouteEvalClaim    = "POST /v1/eval/claim" // EvalClaim -> EvalGrant
	RouteEvalResult   = "POST /v1/eval/result"
)

// PollWait is how long the coordinator holds a long-poll (a layout, or a
// request for work) open before it answers that nothing changed.
const PollWait = 20 * time.Second
