package ps

import (
	"sync"
	"time"
)

// PeerMessage is what workers tell one another about their progress
// (docs/design/stragglers.md): hints for the reassignment policy, never
// decisions, which stay the coordinator's.
type PeerMessage struct {
	From     int
	Progress *PeerProgress
	Cut      *PeerCut
}

// PeerProgress is a worker's position: the piece [Start, End) of a
// partition it trains in a pass, the next row it has not started, and its
// recent rate. Idle means it holds no piece and waits for one.
type PeerProgress struct {
	Pass, Partition    int
	Start, Offset, End int
	Rate               float64 // rows per second, recent
	Idle               bool
}

// PeerCut asks the holder of a piece to cut it at row From, as the
// coordinator's ProgressReply.Cut does, sooner: the asker also asks the
// coordinator (Split), whose protocol alone moves rows.
type PeerCut struct {
	Pass, Partition, From int
}

// Peers carries messages among workers. Send is best effort and never
// blocks; a message that cannot be delivered is dropped, since the next
// one supersedes it.
type Peers interface {
	Send(to int, m PeerMessage)
	Receive() <-chan PeerMessage
}

// PeerHub is the in-process Peers network of a cluster whose workers
// share one process (a local cluster, a benchmark, a test, the
// simulation): one bounded mailbox per rank.
type PeerHub struct {
	mu    sync.Mutex
	boxes map[int]chan PeerMessage
}

// peerMailbox is a mailbox's size: a few rounds of reports from a group.
const peerMailbox = 64

// NewPeerHub returns an empty hub.
func NewPeerHub() *PeerHub { return &PeerHub{boxes: map[int]chan PeerMessage{}} }

// Peers returns rank's end of the hub.
func (h *PeerHub) Peers(rank int) Peers { return hubEnd{h, rank} }

func (h *PeerHub) box(rank int) chan PeerMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.boxes[rank]
	if b == nil {
		b = make(chan PeerMessage, peerMailbox)
		h.boxes[rank] = b
	}
	return b
}

type hubEnd struct {
	h    *PeerHub
	rank int
}

func (e hubEnd) Send(to int, m PeerMessage) {
	m.From = e.rank
	select {
	case e.h.box(to) <- m:
	default:
	}
}

func (e hubEnd) Receive() <-chan PeerMessage { return e.h.box(e.rank) }

// peerSeen is the last progress heard from a peer, and when.
type peerSeen struct {
	p  PeerProgress
	at time.Time
}
