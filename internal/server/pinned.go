package server

import (
	"sync"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/storage/store"
	"github.com/terrace-ml/terrace/keyspace"
)

// pinnedReply is a pull's reply whose values go to the socket straight
// from the store's dense groups (store.PinRun): no copy into a reply
// buffer, and the frame's CRC is the one pass over them. The store keeps
// the pinned values unchanged until the writer has sent them and Release
// runs; a push meanwhile moves the group instead of writing it.
type pinnedReply struct {
	pin   store.Pin
	parts [][]byte
	pre   [wire.ReplyPrefixSize]byte
	frame wire.Frame
	done  func(error) // r.release, bound once so that a reply allocates nothing
}

// minPinnedRun is the shortest mean run, in keys, sent from the store's
// memory (4 KiB of width-1 values): shorter views cost the kernel more
// than the copy they save.
const minPinnedRun = 1024

var pinnedReplies = sync.Pool{New: func() any { return new(pinnedReply) }}

func (r *pinnedReply) release(error) {
	r.pin.Release()
	clear(r.parts)
	r.parts = r.parts[:0]
	pinnedReplies.Put(r)
}

// replyPinned answers a read of runs ks from the store's memory, if every
// run lies in dense groups of a table without optimizer state; it
// reports false, having sent nothing, otherwise.
func replyPinned(c *conn, st *store.Table, ks keyspace.Keys, reqID, epoch uint64, refused int) bool {
	// Short runs (a range whose slots alternate between servers) would
	// hand the kernel hundreds of small pieces and pin slot by slot; a
	// copy into one buffer is cheaper there.
	if !ks.IsRuns() || ks.Len() == 0 || ks.Len() < minPinnedRun*len(ks.Runs()) {
		return false
	}
	r := pinnedReplies.Get().(*pinnedReply)
	if r.done == nil {
		r.done = r.release
	}
	for _, run := range ks.Runs() {
		if !st.PinRun(run.Lo, int(run.Len()), &r.pin) {
			r.pin.Release()
			pinnedReplies.Put(r)
			return false
		}
	}
	wire.PutReply(&r.pre, uint32(refused))
	r.parts = append(r.parts, r.pre[:])
	for _, v := range r.pin.Views {
		r.parts = append(r.parts, wire.F32Bytes(v))
	}
	r.frame.ResetOn(wire.Header{Type: wire.TReply, Epoch: epoch, ReqID: reqID}, c.Authenticated(), r.parts...)
	c.Send(transport.Outgoing{Frame: &r.frame, Done: r.done})
	return true
}
