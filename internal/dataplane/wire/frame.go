package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"io"
	"math"
	"net"
)

// Protocol constants.
const (
	Magic      uint16 = 0x5054 // "TP" on the wire
	Version    uint8  = 1
	HeaderSize        = 32
	// DefaultMaxPayload bounds a frame's payload. Senders cut large vectors
	// into frames of FrameTarget bytes, so a larger frame is a fault.
	DefaultMaxPayload = 16 << 20
	// FrameTarget is the payload size senders aim for when they cut a large
	// message: big enough that per-frame costs vanish, small enough that
	// frames pipeline through both ends.
	FrameTarget = 2 << 20
)

// Type is a frame's message type.
type Type uint8

// The message types.
const (
	THello    Type = 1 // client introduces itself; body: Hello
	TPush     Type = 2 // body: Data with values
	TPull     Type = 3 // body: Data without values
	TPushPull Type = 4 // body: Data with values; the reply holds the values after the push
	TClock    Type = 5 // body: Clock
	TReply    Type = 6 // body: Reply (values for pulls)
	TError    Type = 7 // body: Error
	// TReplicate carries the full state of keys from a range's head to
	// the other servers of its chain; body: Replicate.
	TReplicate Type = 8
	// TPing asks for a reply at once: the coordinator's liveness probe. The
	// reply names the server that answers (PingReply), so that another
	// server listening at a failed one's address does not keep it alive.
	TPing Type = 9
	// TLedger carries, from an ActivePS to a BackupPS, the pairs of pushes
	// it is about to acknowledge, each scoped to the slots the BackupPS
	// holds of it; body: Replicate with pairs only (docs/design/tiers.md).
	TLedger Type = 10
)

func (t Type) String() string {
	switch t {
	case THello:
		return "hello"
	case TPush:
		return "push"
	case TPull:
		return "pull"
	case TPushPull:
		return "pushpull"
	case TClock:
		return "clock"
	case TReply:
		return "reply"
	case TError:
		return "error"
	case TReplicate:
		return "replicate"
	case TPing:
		return "ping"
	case TLedger:
		return "ledger"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Decoding errors. Every decoder failure wraps ErrCorrupt.
var (
	ErrCorrupt   = errors.New("wire: corrupt frame")
	ErrBadMagic  = fmt.Errorf("%w: bad magic", ErrCorrupt)
	ErrVersion   = fmt.Errorf("%w: unsupported version", ErrCorrupt)
	ErrTooLarge  = fmt.Errorf("%w: payload too large", ErrCorrupt)
	ErrChecksum  = fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	ErrTruncated = fmt.Errorf("%w: truncated", ErrCorrupt)
)

// FlagUnsummed marks a frame whose CRC covers its header only: its
// connection authenticates every byte (TLS's AEAD, whose tag is checked
// in the pass that decrypts), so a second check of the payload would cost
// a pass over every byte for nothing. A reader refuses such a frame on a
// connection that does not authenticate (Reader.Authenticated).
const FlagUnsummed uint16 = 1 << 0

// ErrUnsummed is an unsummed frame on a connection that does not
// authenticate its bytes.
var ErrUnsummed = fmt.Errorf("%w: payload not checksummed on a connection without authentication", ErrCorrupt)

// Header is a frame header.
type Header struct {
	Type  Type
	Flags uint16
	Epoch uint64
	ReqID uint64
	Len   uint32
	CRC   uint32
}

// put writes h (with Len and CRC as set) into b[:HeaderSize].
func (h *Header) put(b []byte) {
	binary.LittleEndian.PutUint16(b[0:], Magic)
	b[2] = Version
	b[3] = byte(h.Type)
	binary.LittleEndian.PutUint16(b[4:], h.Flags)
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], h.Epoch)
	binary.LittleEndian.PutUint64(b[16:], h.ReqID)
	binary.LittleEndian.PutUint32(b[24:], h.Len)
	binary.LittleEndian.PutUint32(b[28:], h.CRC)
}

// ParseHeader decodes and checks a header; maxPayload <= 0 means DefaultMaxPayload.
func ParseHeader(b []byte, maxPayload int) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrTruncated
	}
	if binary.LittleEndian.Uint16(b[0:]) != Magic {
		return Header{}, ErrBadMagic
	}
	if b[2] != Version {
		return Header{}, fmt.Errorf("%w %d", ErrVersion, b[2])
	}
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	h := Header{
		Type:  Type(b[3]),
		Flags: binary.LittleEndian.Uint16(b[4:]),
		Epoch: binary.LittleEndian.Uint64(b[8:]),
		ReqID: binary.LittleEndian.Uint64(b[16:]),
		Len:   binary.LittleEndian.Uint32(b[24:]),
		CRC:   binary.LittleEndian.Uint32(b[28:]),
	}
	if h.Type < THello || h.Type > TLedger {
		return Header{}, fmt.Errorf("%w: unknown message type %d", ErrCorrupt, b[3])
	}
	if binary.LittleEndian.Uint16(b[6:]) != 0 {
		return Header{}, fmt.Errorf("%w: reserved header bits set", ErrCorrupt)
	}
	if h.Flags&^FlagUnsummed != 0 {
		return Header{}, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, h.Flags)
	}
	if int64(h.Len) > int64(maxPayload) {
		return Header{}, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, h.Len, maxPayload)
	}
	return h, nil
}

// headerCRC is the CRC32C of the header's first 28 bytes (everything but the CRC).
func headerCRC(b []byte) uint32 { return crc32c.Update(0, b[:HeaderSize-4]) }

// Frame is an outgoing frame: a header and a payload in parts, which are
// written with one vectored write and never copied, so that float32 vectors
// go to the socket straight from the caller's memory.
type Frame struct {
	hdr   [HeaderSize]byte
	parts net.Buffers
	// tailSum, if set, sums the payload's last tail parts (SumTailWith).
	tail    int
	tailSum func(crc uint32) uint32
}

// NewFrame builds a frame of the given parts, its payload summed in its
// CRC. The parts must not change until the frame is written.
func NewFrame(h Header, parts ...[]byte) *Frame {
	f := &Frame{}
	f.Reset(h, parts...)
	return f
}

// NewFrameOn builds a frame for a connection that authenticates its bytes
// (authenticated) or not: on the first, its payload is left out of the
// CRC (FlagUnsummed). Should it be written to a connection that does not
// authenticate after all (a retry elsewhere), the writer sums it then
// (AppendSummedTo).
func NewFrameOn(h Header, authenticated bool, parts ...[]byte) *Frame {
	f := &Frame{}
	f.ResetOn(h, authenticated, parts...)
	return f
}

// Reset rebuilds f in place, for reuse, its payload summed.
func (f *Frame) Reset(h Header, parts ...[]byte) { f.ResetOn(h, false, parts...) }

// ResetOn rebuilds f in place for a connection that authenticates its
// bytes or not, as NewFrameOn builds one.
func (f *Frame) ResetOn(h Header, authenticated bool, parts ...[]byte) {
	h.Flags &^= FlagUnsummed
	if authenticated {
		h.Flags |= FlagUnsummed
	}
	buildHeader(h, !authenticated, &f.hdr, parts, 0, nil)
	f.setParts(parts)
	f.tail, f.tailSum = 0, nil
}

// SumTailWith has the writer of an unsummed frame (AppendSummedTo) sum
// its payload's last k parts with sum, which takes the CRC32C of the
// header and the payload before them and returns it after them: a push
// spread over several servers has its runs summed in the order of the
// caller's memory, each into the frame that carries it, by whichever
// writer comes first (ps.spreadSums), instead of run by run per frame.
// The parts must be non-empty.
func (f *Frame) SumTailWith(k int, sum func(crc uint32) uint32) {
	f.tail, f.tailSum = k, sum
}

// buildHeader writes h into hdr with the payload's length and the CRC of
// the header and, if summed, the payload: its last tail parts by tailSum
// if set.
func buildHeader(h Header, summed bool, hdr *[HeaderSize]byte, parts [][]byte, tail int, tailSum func(uint32) uint32) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	h.Len = uint32(n)
	h.CRC = 0
	h.put(hdr[:])
	crc := headerCRC(hdr[:])
	if summed {
		if tailSum == nil {
			tail = 0
		}
		for _, p := range parts[:len(parts)-tail] {
			crc = crc32c.Update(crc, p)
		}
		if tail > 0 {
			crc = tailSum(crc)
		}
	}
	binary.LittleEndian.PutUint32(hdr[28:], crc)
}

func (f *Frame) setParts(parts [][]byte) {
	f.parts = append(f.parts[:0], f.hdr[:])
	for _, p := range parts {
		if len(p) > 0 {
			f.parts = append(f.parts, p)
		}
	}
}

// Unsummed reports whether f's payload is left out of its CRC.
func (f *Frame) Unsummed() bool {
	return binary.LittleEndian.Uint16(f.hdr[4:])&FlagUnsummed != 0
}

// Size is the frame's length on the wire.
func (f *Frame) Size() int {
	n := 0
	for _, p := range f.parts {
		n += len(p)
	}
	return n
}

// AppendTo appends the frame's buffers to bufs, for batching several frames
// into one vectored write.
func (f *Frame) AppendTo(bufs net.Buffers) net.Buffers { return append(bufs, f.parts...) }

// AppendSummedTo appends the frame's buffers to bufs with its payload
// summed: an unsummed frame gets a summed header written into hdr (the
// frame itself is left as it is, since another writer may hold it), a
// summed one is appended as it is.
func (f *Frame) AppendSummedTo(bufs net.Buffers, hdr *[HeaderSize]byte) net.Buffers {
	if !f.Unsummed() {
		return f.AppendTo(bufs)
	}
	h, _ := ParseHeader(f.hdr[:], math.MaxInt32)
	h.Flags &^= FlagUnsummed
	payload := f.parts[1:]
	buildHeader(h, true, hdr, payload, f.tail, f.tailSum)
	return append(append(bufs, hdr[:]), payload...)
}

// WriteTo writes the frame, its payload summed.
func (f *Frame) WriteTo(w io.Writer) (int64, error) {
	var hdr [HeaderSize]byte
	b := f.AppendSummedTo(nil, &hdr)
	return b.WriteTo(w)
}

// Reader reads frames from a stream into reusable, 8-byte-aligned buffers.
// Authenticated says that the stream authenticates its bytes (TLS): only
// then does the Reader take unsummed frames (FlagUnsummed).
type Reader struct {
	r             io.Reader
	hdr           [HeaderSize]byte
	buf           []uint64
	MaxPayload    int
	Authenticated bool
	// Vec, if set, reads from the same stream into several buffers at
	// once (readv), for ReadPayloadVec.
	Vec VecReader
	vec [][]byte // readVecSummed's buffers still to fill, kept for reuse
}

// VecReader reads into bufs in order, as readv(2) does: it returns how
// many bytes it read, at least one unless it fails.
type VecReader interface {
	ReadVec(bufs [][]byte) (int, error)
}

// NewReader returns a Reader on r; maxPayload <= 0 means DefaultMaxPayload.
func NewReader(r io.Reader, maxPayload int) *Reader {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	return &Reader{r: r, MaxPayload: maxPayload}
}

// Next reads the next frame's header and checks it, leaving the payload
// unread; the caller then calls Payload or ReadPayloadInto.
func (r *Reader) Next() (Header, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return Header{}, ErrTruncated
		}
		return Header{}, err
	}
	return ParseHeader(r.hdr[:], r.MaxPayload)
}

// Payload reads the payload of the frame whose header Next returned into
// the Reader's own buffer, valid until the next call, and checks the CRC.
func (r *Reader) Payload(h Header) ([]byte, error) {
	words := (int(h.Len) + 7) / 8
	if cap(r.buf) < words {
		r.buf = make([]uint64, words)
	}
	p := U64Bytes(r.buf[:words])[:h.Len]
	if err := r.ReadPayloadInto(h, p); err != nil {
		return nil, err
	}
	return p, nil
}

// ReadPayloadInto reads the payload into dst (len(dst) == h.Len) and checks
// the CRC; this lets a caller receive a vector straight into its final place.
func (r *Reader) ReadPayloadInto(h Header, dst []byte) error {
	if len(dst) != int(h.Len) {
		return fmt.Errorf("wire: payload buffer of %d bytes for a %d-byte payload", len(dst), h.Len)
	}
	return r.ReadPayloadSplit(h, nil, dst)
}

// readSummed fills b from the stream and returns crc updated with it,
// if sum. Each piece is summed as soon as a read returns it, while the
// kernel's copy has left it in the cache: the CRC rides on the socket
// copy instead of making a second pass over a 2 MiB payload from memory.
func (r *Reader) readSummed(crc uint32, b []byte, sum bool) (uint32, error) {
	for off := 0; off < len(b); {
		n, err := r.r.Read(b[off:])
		if sum {
			crc = crc32c.Update(crc, b[off:off+n])
		}
		off += n
		if err != nil {
			if off == len(b) && err == io.EOF {
				break
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return 0, ErrTruncated
			}
			return 0, err
		}
	}
	return crc, nil
}

// ReadPayloadSplit reads a payload of len(head)+len(body) bytes into two
// buffers and checks the CRC: a reply's fixed prefix into head, and its
// values straight into the caller's destination vector.
func (r *Reader) ReadPayloadSplit(h Header, head, body []byte) error {
	if len(head)+len(body) != int(h.Len) {
		return fmt.Errorf("wire: payload buffers of %d+%d bytes for a %d-byte payload", len(head), len(body), h.Len)
	}
	sum := h.Flags&FlagUnsummed == 0
	if !sum && !r.Authenticated {
		return ErrUnsummed
	}
	crc := headerCRC(r.hdr[:])
	for _, b := range [][]byte{head, body} {
		var err error
		if crc, err = r.readSummed(crc, b, sum); err != nil {
			return err
		}
	}
	if crc != h.CRC {
		return ErrChecksum
	}
	return nil
}

// ReadPayloadVec reads a payload of len(head) plus the bodies' lengths
// into head and then each body in turn, and checks the CRC: a reply's
// prefix, then its values straight into the caller's runs. With a Vec
// reader the bodies are filled by vectored reads, each summed as it
// lands; without one, body by body.
func (r *Reader) ReadPayloadVec(h Header, head []byte, bodies [][]byte) error {
	n := len(head)
	for _, b := range bodies {
		n += len(b)
	}
	if n != int(h.Len) {
		return fmt.Errorf("wire: payload buffers of %d bytes for a %d-byte payload", n, h.Len)
	}
	sum := h.Flags&FlagUnsummed == 0
	if !sum && !r.Authenticated {
		return ErrUnsummed
	}
	crc, err := r.readSummed(headerCRC(r.hdr[:]), head, sum)
	if err != nil {
		return err
	}
	if r.Vec == nil || len(bodies) < 2 {
		for _, b := range bodies {
			if crc, err = r.readSummed(crc, b, sum); err != nil {
				return err
			}
		}
	} else if crc, err = r.readVecSummed(crc, bodies, sum); err != nil {
		return err
	}
	if crc != h.CRC {
		return ErrChecksum
	}
	return nil
}

// readVecSummed fills bodies through r.Vec, summing each piece a read
// returns while it is in the cache, as readSummed does. The buffers still
// to fill are one slice of the Reader's, trimmed in place as reads land:
// rebuilding it for every read (one per few dozen KiB of a reply of a
// hundred runs) cost a copy of the whole list each time.
func (r *Reader) readVecSummed(crc uint32, bodies [][]byte, sum bool) (uint32, error) {
	all := append(r.vec[:0], bodies...)
	defer func() {
		clear(all) // drop the references to the caller's memory
		r.vec = all[:0]
	}()
	rest := all
	for len(rest) > 0 {
		if len(rest[0]) == 0 {
			rest = rest[1:]
			continue
		}
		n, err := r.Vec.ReadVec(rest)
		for n > 0 {
			take := min(n, len(rest[0]))
			if sum {
				crc = crc32c.Update(crc, rest[0][:take])
			}
			rest[0] = rest[0][take:]
			n -= take
			if len(rest[0]) == 0 {
				rest = rest[1:]
			}
		}
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return 0, ErrTruncated
			}
			return 0, err
		}
	}
	return crc, nil
}

// Discard skips the payload of a frame nobody wants (a reply to a request
// that was abandoned), still checking the stream stays in sync.
func (r *Reader) Discard(h Header) error {
	_, err := r.Payload(h)
	return err
}
