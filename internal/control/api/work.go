package api

// Data partitions are leased to workers pass by pass, in pieces. A piece
// is the rows [Start, End) of a partition in one pass; End = ToEnd means
// "to the partition's end", which only workers know (they read the data).
// A pass begins with one piece per partition, [0, ToEnd). A worker that
// has no work left may ask to split the piece another worker holds
// (Split): the holder learns of the request in its next Progress reply,
// picks the row At where it stops (Update.Cut), and the tail [At, End)
// becomes a new piece granted to the asker. A partition is complete once
// all its pieces are; a piece whose holder dies returns to the pool at
// its recorded offset, with its own end.

// ToEnd is the End of a piece that runs to its partition's last row.
const ToEnd = -1

// MaxStateBytes bounds one partition state blob.
const MaxStateBytes = 16 << 20

// Acquire asks for a piece of pass Pass to train.
type Acquire struct {
	Rank int `json:"rank"`
	Pass int `json:"pass"`
}

// Grant answers Acquire and Split.
type Grant struct {
	// Partition, Start and End name the piece; training begins at Offset
	// (Start, or where a worker that lost the piece had got to).
	// Partition is -1 when the pass is done, or when nothing could be
	// granted yet (the client asks again).
	Partition int `json:"partition"`
	Start     int `json:"start"`
	Offset    int `json:"offset"`
	End       int `json:"end"`
	// States are the versions of the piece's worker state as of Offset, in
	// row order; joined, they are the state of the rows [Start, End). One
	// version once the piece's holder has reported state; several at the
	// start of a pass whose previous pass split the partition; none when
	// the partition has no state yet. Fetch each with State.
	States []uint64 `json:"states,omitempty"`
	// Lease names this grant; reports on the piece carry it.
	Lease uint64 `json:"lease,omitempty"`
	// Done is set when every partition of the pass is complete.
	Done bool `json:"done"`
	// Clock, with Done, is the highest clock any worker reported: workers
	// advance to it so that none holds the others back next pass.
	Clock int64 `json:"clock"`
}

// Update is a holder's report on its piece: the rows before Offset are
// trained and their pushes acknowledged.
type Update struct {
	Rank      int   `json:"rank"`
	Pass      int   `json:"pass"`
	Partition int   `json:"partition"`
	Offset    int   `json:"offset"`
	Clock     int64 `json:"clock"`
	// Complete: the whole piece is trained (Offset is its end).
	Complete bool `json:"complete,omitempty"`
	// Lease is the grant reported on (Grant.Lease; 0 checks the rank only).
	Lease uint64 `json:"lease,omitempty"`
	// State, when HasState is set, is the piece's worker state as of
	// Offset (possibly empty).
	State    []byte `json:"state,omitempty"`
	HasState bool   `json:"has_state,omitempty"`
	// Cut answers a pending split request (ProgressReply.Cut).
	Cut *Cut `json:"cut,omitempty"`
}

// Cut is a holder's answer to a split request: it stops at row At, and
// the rows [At, End) of its piece become a new piece.
type Cut struct {
	// At is at least the request's From and at least the first row the
	// holder has not started; the holder's Offset is at most At.
	At int `json:"at"`
	// Declined: the holder keeps its whole piece (it is nearly done); At
	// is then ignored.
	Declined bool `json:"declined,omitempty"`
	// State, when HasState is set, is the worker state of the tail rows
	// [At, End), which the new piece's holder starts from.
	State    []byte `json:"state,omitempty"`
	HasState bool   `json:"has_state,omitempty"`
}

// ProgressReply answers an Update.
type ProgressReply struct {
	// State is the piece's state version after the update when it is one
	// version (0 otherwise).
	State uint64 `json:"state"`
	// End is the piece's end now: it shrinks when the holder cuts it.
	End int `json:"end"`
	// Cut, when set, asks the holder to cut its piece (answer with
	// Update.Cut).
	Cut *CutRequest `json:"cut,omitempty"`
}

// CutRequest asks a holder to give up the rows of its piece from From
// (a hint: the holder may cut later) to its end.
type CutRequest struct {
	From int `json:"from"`
}

// Split asks for the tail of the piece of Partition, in pass Pass, that
// holds row From: its holder cuts it at From or later, and the tail is
// granted to Rank. It fails with ErrNoSplit when that cannot be.
type Split struct {
	Rank      int `json:"rank"`
	Pass      int `json:"pass"`
	Partition int `json:"partition"`
	From      int `json:"from"`
	// AnyFree asks for any free piece of the pass instead, if there is
	// one: a helper that asks while pieces are still free needs no cut.
	AnyFree bool `json:"any_free,omitempty"`
}

// Rank names a worker in heartbeats and departures.
type Rank struct {
	Rank int `json:"rank"`
}

// Beat is a worker's heartbeat: its rank, and its clock now (0 if it
// has none), so that the clock spread status shows is the workers' own
// and not that of their last progress records, which a slowed worker
// makes seconds apart (it read 146 clocks under ssp:128, against a true
// spread under 100).
type Beat struct {
	Rank  int   `json:"rank"`
	Clock int64 `json:"clock,omitempty"`
}
