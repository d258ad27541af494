package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// KeyKind says how a data message names its keys.
type KeyKind uint8

// The key kinds.
const (
	// KeysExplicit: the message holds Count sorted keys.
	KeysExplicit KeyKind = 0
	// KeysCache: the message holds Count keys, and the receiver keeps them
	// under CacheID for this connection (the PS paper's key caching).
	KeysCache KeyKind = 1
	// KeysCached: the message holds no keys; it names a key list sent
	// earlier on this connection with KeysCache under CacheID.
	KeysCached KeyKind = 2
	// KeysRange: the keys are those of [Lo,Hi) whose slots the receiver
	// owns under the message's epoch, Count of them, in key order.
	KeysRange KeyKind = 3
)

// Enc is the encoding of a push's values.
type Enc uint8

// The value encodings.
const (
	EncRaw    Enc = 0 // float32 each
	EncSparse Enc = 1 // nnz u32, pad u32, index [nnz]u32, value [nnz]f32
	EncFP16   Enc = 2 // IEEE 754 binary16 each
	EncInt8   Enc = 3 // scale f32, pad u32, int8 each; value = q*scale
)

// DataPrefixSize is the fixed part of a data message; ancestors follow it,
// then keys, then values.
const DataPrefixSize = 64

// MaxAncestors bounds how many re-sends a part remembers.
const MaxAncestors = 16

// Data is the body of push, pull and pushpull messages.
type Data struct {
	Table   uint32
	Worker  uint32
	Clock   int64
	Kind    KeyKind
	Enc     Enc
	CacheID uint32
	Count   uint32 // keys named
	Width   uint32 // values per key
	Lo, Hi  uint64 // KeysRange only
	// Seq numbers a push among its client's pushes (from 1; 0 for pulls).
	// Servers remember applied (client, seq) pairs, and replicas receive
	// them with the state, so that a push re-sent after a failure is
	// applied exactly once.
	Seq uint64
	// Acked is the client's low watermark: every push with a smaller Seq
	// has been acknowledged, so servers may forget those pairs.
	Acked uint64
	// Ancestors are the Seqs of the parts this one re-sends after failures
	// (at most MaxAncestors): a server holding the effect of any of them
	// holds this part's, since only the original part's own state carries
	// their pairs.
	Ancestors []uint64
	Keys      []uint64
	Vals      []byte // encoded values; empty for pulls
}

// NumValues is Count*Width.
func (d *Data) NumValues() int { return int(d.Count) * int(d.Width) }

// PutPrefix writes d's fixed part into b.
func (d *Data) PutPrefix(b *[DataPrefixSize]byte) {
	binary.LittleEndian.PutUint32(b[0:], d.Table)
	binary.LittleEndian.PutUint32(b[4:], d.Worker)
	binary.LittleEndian.PutUint64(b[8:], uint64(d.Clock))
	b[16] = byte(d.Kind)
	b[17] = byte(d.Enc)
	binary.LittleEndian.PutUint16(b[18:], uint16(len(d.Ancestors)))
	binary.LittleEndian.PutUint32(b[20:], d.CacheID)
	binary.LittleEndian.PutUint32(b[24:], d.Count)
	binary.LittleEndian.PutUint32(b[28:], d.Width)
	binary.LittleEndian.PutUint64(b[32:], d.Lo)
	binary.LittleEndian.PutUint64(b[40:], d.Hi)
	binary.LittleEndian.PutUint64(b[48:], d.Seq)
	binary.LittleEndian.PutUint64(b[56:], d.Acked)
}

// Parts returns the payload parts of d with prefix buffer b: the prefix, the
// keys (when the kind carries them) and the values, all without copying.
func (d *Data) Parts(b *[DataPrefixSize]byte) [][]byte {
	d.PutPrefix(b)
	parts := [][]byte{b[:]}
	if len(d.Ancestors) > 0 {
		parts = append(parts, U64Bytes(d.Ancestors))
	}
	if d.Kind == KeysExplicit || d.Kind == KeysCache {
		parts = append(parts, U64Bytes(d.Keys))
	}
	if len(d.Vals) > 0 {
		parts = append(parts, d.Vals)
	}
	return parts
}

// ParseData decodes a data message. The returned Keys and Vals alias p.
// withVals says whether the message type carries values.
func ParseData(p []byte, withVals bool) (Data, error) {
	if len(p) < DataPrefixSize {
		return Data{}, fmt.Errorf("%w: data message of %d bytes", ErrTruncated, len(p))
	}
	if !aligned(p, 8) {
		return Data{}, fmt.Errorf("wire: unaligned payload buffer")
	}
	d := Data{
		Table:   binary.LittleEndian.Uint32(p[0:]),
		Worker:  binary.LittleEndian.Uint32(p[4:]),
		Clock:   int64(binary.LittleEndian.Uint64(p[8:])),
		Kind:    KeyKind(p[16]),
		Enc:     Enc(p[17]),
		CacheID: binary.LittleEndian.Uint32(p[20:]),
		Count:   binary.LittleEndian.Uint32(p[24:]),
		Width:   binary.LittleEndian.Uint32(p[28:]),
		Lo:      binary.LittleEndian.Uint64(p[32:]),
		Hi:      binary.LittleEndian.Uint64(p[40:]),
		Seq:     binary.LittleEndian.Uint64(p[48:]),
		Acked:   binary.LittleEndian.Uint64(p[56:]),
	}
	if d.Width == 0 || d.Width > 1<<16 {
		return Data{}, fmt.Errorf("%w: width %d", ErrCorrupt, d.Width)
	}
	rest, err := d.parseKeys(p[DataPrefixSize:], int(binary.LittleEndian.Uint16(p[18:])))
	if err != nil {
		return Data{}, err
	}
	if !withVals {
		if len(rest) != 0 || d.Enc != EncRaw {
			return Data{}, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(rest))
		}
		return d, nil
	}
	if want, err := encodedSize(d.Enc, rest, d.NumValues()); err != nil {
		return Data{}, err
	} else if want != len(rest) {
		return Data{}, fmt.Errorf("%w: %d value bytes for %d values in encoding %d (want %d)", ErrCorrupt, len(rest), d.NumValues(), d.Enc, want)
	}
	d.Vals = rest
	return d, nil
}

// parseKeys reads na ancestors and the key list (by d.Kind) from the start
// of rest, and returns what follows them: the values.
func (d *Data) parseKeys(rest []byte, na int) ([]byte, error) {
	if na > 0 {
		if na > MaxAncestors || 8*na > len(rest) {
			return nil, fmt.Errorf("%w: %d ancestors", ErrCorrupt, na)
		}
		d.Ancestors = BytesU64(rest[:8*na])
		rest = rest[8*na:]
	}
	switch d.Kind {
	case KeysExplicit, KeysCache:
		n := int(d.Count) * 8
		if n > len(rest) {
			return nil, fmt.Errorf("%w: %d keys in %d bytes", ErrTruncated, d.Count, len(rest))
		}
		d.Keys = BytesU64(rest[:n])
		rest = rest[n:]
	case KeysCached:
	case KeysRange:
		if d.Hi < d.Lo || d.Hi-d.Lo < uint64(d.Count) {
			return nil, fmt.Errorf("%w: %d keys in range [%d,%d)", ErrCorrupt, d.Count, d.Lo, d.Hi)
		}
	default:
		return nil, fmt.Errorf("%w: key kind %d", ErrCorrupt, d.Kind)
	}
	return rest, nil
}

// encodedSize returns how many bytes n values take in enc, reading the
// sparse count from b where needed.
func encodedSize(enc Enc, b []byte, n int) (int, error) {
	switch enc {
	case EncRaw:
		return 4 * n, nil
	case EncSparse:
		if len(b) < 8 {
			return 0, fmt.Errorf("%w: sparse values without count", ErrTruncated)
		}
		nnz := int(binary.LittleEndian.Uint32(b))
		if nnz > n {
			return 0, fmt.Errorf("%w: %d sparse entries for %d values", ErrCorrupt, nnz, n)
		}
		return 8 + 8*nnz, nil
	case EncFP16:
		return 2 * n, nil
	case EncInt8:
		return 8 + n, nil
	}
	return 0, fmt.Errorf("%w: value encoding %d", ErrCorrupt, enc)
}

// EncodeValues encodes v in enc, using scratch for the bytes where the
// encoding is not the identity; EncRaw returns a view of v itself.
func EncodeValues(enc Enc, v []float32, scratch []byte) []byte {
	switch enc {
	case EncSparse:
		nnz := 0
		for _, x := range v {
			if x != 0 {
				nnz++
			}
		}
		b := grow(scratch, 8+8*nnz)
		binary.LittleEndian.PutUint32(b[0:], uint32(nnz))
		binary.LittleEndian.PutUint32(b[4:], 0)
		idx, val := b[8:8+4*nnz], b[8+4*nnz:]
		j := 0
		for i, x := range v {
			if x != 0 {
				binary.LittleEndian.PutUint32(idx[4*j:], uint32(i))
				binary.LittleEndian.PutUint32(val[4*j:], math.Float32bits(x))
				j++
			}
		}
		return b
	case EncFP16:
		b := grow(scratch, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], F32ToF16(x))
		}
		return b
	case EncInt8:
		b := grow(scratch, 8+len(v))
		var m float32
		for _, x := range v {
			m = max(m, float32(math.Abs(float64(x))))
		}
		scale := m / 127
		binary.LittleEndian.PutUint32(b[0:], math.Float32bits(scale))
		binary.LittleEndian.PutUint32(b[4:], 0)
		for i, x := range v {
			q := int8(0)
			if scale > 0 {
				q = int8(math.Round(float64(x / scale)))
			}
			b[8+i] = byte(q)
		}
		return b
	}
	return F32Bytes(v)
}

// SparseWorthIt reports whether the sparse encoding of v is smaller than raw.
func SparseWorthIt(v []float32) bool {
	nnz := 0
	for _, x := range v {
		if x != 0 {
			nnz++
		}
	}
	return 8+8*nnz < 4*len(v)
}

// DecodeValues decodes b, encoded in enc, into dst (n = len(dst) values).
// A raw encoding is better read through BytesF32 without a copy; this
// handles it too for completeness.
func DecodeValues(enc Enc, b []byte, dst []float32) error {
	n := len(dst)
	size, err := encodedSize(enc, b, n)
	if err != nil {
		return err
	}
	if size != len(b) {
		return fmt.Errorf("%w: %d value bytes, want %d", ErrCorrupt, len(b), size)
	}
	switch enc {
	case EncRaw:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case EncSparse:
		clear(dst)
		nnz := int(binary.LittleEndian.Uint32(b))
		idx, val := b[8:8+4*nnz], b[8+4*nnz:]
		prev := -1
		for j := 0; j < nnz; j++ {
			i := int(binary.LittleEndian.Uint32(idx[4*j:]))
			if i <= prev || i >= n {
				return fmt.Errorf("%w: sparse index %d after %d (n=%d)", ErrCorrupt, i, prev, n)
			}
			prev = i
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(val[4*j:]))
		}
	case EncFP16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case EncInt8:
		scale := math.Float32frombits(binary.LittleEndian.Uint32(b))
		if math.IsNaN(float64(scale)) || math.IsInf(float64(scale), 0) || scale < 0 {
			return fmt.Errorf("%w: int8 scale %v", ErrCorrupt, scale)
		}
		for i := range dst {
			dst[i] = float32(int8(b[8+i])) * scale
		}
	}
	return nil
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// F32ToF16 converts to IEEE 754 binary16, rounding to nearest even;
// values beyond the half range become infinities.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	man := b & 0x7fffff
	switch {
	case exp == 0xff:
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15:
		return sign | 0x7c00
	case exp-127 >= -14:
		e := uint32(exp-127+15) << 10
		h := e | man>>13
		rest := man & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
			h++ // may carry into the exponent, which is the right result
		}
		return sign | uint16(h)
	case exp-127 >= -25:
		man |= 0x800000
		shift := uint(-14-(exp-127)) + 13
		h := man >> shift
		rest := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	return sign
}

// F16ToF32 converts from IEEE 754 binary16.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch exp {
	case 0:
		v := float32(man) / (1 << 24) // subnormal: man * 2^-24
		if sign != 0 {
			v = -v
		}
		return v
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// ReplyPrefixSize is the fixed part of a reply; a pull's values follow it.
const ReplyPrefixSize = 8

// PutReply writes a reply prefix: how many keys' updates the server refused
// as non-finite.
func PutReply(b *[ReplyPrefixSize]byte, refused uint32) {
	binary.LittleEndian.PutUint32(b[0:], refused)
	binary.LittleEndian.PutUint32(b[4:], 0)
}

// ParseReply decodes a reply into the refused count and the values' bytes.
func ParseReply(p []byte) (refused uint32, vals []byte, err error) {
	if len(p) < ReplyPrefixSize {
		return 0, nil, fmt.Errorf("%w: reply of %d bytes", ErrTruncated, len(p))
	}
	if (len(p)-ReplyPrefixSize)%4 != 0 {
		return 0, nil, fmt.Errorf("%w: reply values of %d bytes", ErrCorrupt, len(p)-ReplyPrefixSize)
	}
	return binary.LittleEndian.Uint32(p), p[ReplyPrefixSize:], nil
}

// PingReply is the reply to a ping: the reply prefix, then the ID of the
// server that answers.
func PingReply(id string) []byte {
	var pre [ReplyPrefixSize]byte
	PutReply(&pre, 0)
	return append(pre[:], id...)
}

// ParsePingReply decodes the ID a ping's reply names ("" from a server
// that names none).
func ParsePingReply(p []byte) (string, error) {
	if len(p) < ReplyPrefixSize {
		return "", fmt.Errorf("%w: ping reply of %d bytes", ErrTruncated, len(p))
	}
	return string(p[ReplyPrefixSize:]), nil
}

// The clock sentinels: the two clocks above every real clock that a worker
// sends (and a server counts it at) when it holds no one back.
const (
	// ClockIdle is the clock a worker sends while it waits for work: it
	// pushes nothing meanwhile. The next clock it sends ends the wait, and
	// counts from then on (the highest clock any worker reported to the
	// coordinator, or its own if higher): reads that need its pushes from
	// then on wait for them as for any other worker's.
	ClockIdle = 1<<63 - 2
	// ClockFinished is the clock of a worker that will send no more: it
	// finished, or the layout lists it as finished (it died or left).
	ClockFinished = 1<<63 - 1
)

// ClockReplySize is the size of the reply to a clock message: the reply
// prefix, then the lowest clock the worker may push at (8 bytes,
// little-endian): the clock the server counts it at, or, for a worker that
// joins a job under way or comes back from ClockIdle, where it must start:
// the server's published minimum at least, since reads it answered did not
// wait for the worker, and every clock it counts a worker at, since a
// server that published a higher minimum may have died. A worker that
// enters moves its own clock up to the highest any server answers and
// sends it; other clock messages ignore the reply.
const ClockReplySize = ReplyPrefixSize + 8

// PutClockReply writes the reply to a clock message.
func PutClockReply(b *[ClockReplySize]byte, clock int64) {
	binary.LittleEndian.PutUint64(b[0:], 0)
	binary.LittleEndian.PutUint64(b[ReplyPrefixSize:], uint64(clock))
}

// ParseClockReply decodes the reply to a clock message.
func ParseClockReply(p []byte) (int64, error) {
	if len(p) != ClockReplySize {
		return 0, fmt.Errorf("%w: clock reply of %d bytes", ErrCorrupt, len(p))
	}
	v := int64(binary.LittleEndian.Uint64(p[ReplyPrefixSize:]))
	if v < 0 {
		return 0, fmt.Errorf("%w: negative clock", ErrCorrupt)
	}
	return v, nil
}

// Clock is the body of a clock message: worker has finished clock Clock-1
// and starts Clock.
type Clock struct {
	Worker uint32
	Clock  int64
}

// ClockSize is the size of a clock message body.
const ClockSize = 16

// Put writes c into b.
func (c Clock) Put(b *[ClockSize]byte) {
	binary.LittleEndian.PutUint32(b[0:], c.Worker)
	binary.LittleEndian.PutUint32(b[4:], 0)
	binary.LittleEndian.PutUint64(b[8:], uint64(c.Clock))
}

// ParseClock decodes a clock message.
func ParseClock(p []byte) (Clock, error) {
	if len(p) != ClockSize {
		return Clock{}, fmt.Errorf("%w: clock message of %d bytes", ErrCorrupt, len(p))
	}
	c := Clock{Worker: binary.LittleEndian.Uint32(p), Clock: int64(binary.LittleEndian.Uint64(p[8:]))}
	if c.Clock < 0 {
		return Clock{}, fmt.Errorf("%w: negative clock", ErrCorrupt)
	}
	return c, nil
}

// Role says who opened a connection.
type Role uint8

// The roles.
const (
	RoleClient  Role = 0 // a worker or a tool
	RoleReplica Role = 1 // a server that replicates to this one
	// RoleLedger is an ActivePS sending its loss-ledger pairs (TLedger) to
	// a BackupPS, on a connection of their own beside its replication.
	RoleLedger Role = 2
)

// Hello is the first message of a connection.
type Hello struct {
	Worker uint32 // the worker's rank, or NoWorker for a non-worker client
	Role   Role
	// Client identifies the client process across connections and
	// servers: the key of its (client, seq) pairs. Random per process.
	Client uint64
	Node   string // the client's node ID, for logs and errors
}

// NoWorker marks a client that is not a worker (an evaluator, a tool).
const NoWorker = math.MaxUint32

// AppendHello encodes h.
func AppendHello(b []byte, h Hello) []byte {
	b = binary.LittleEndian.AppendUint32(b, h.Worker)
	b = append(b, byte(h.Role), 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(h.Node)))
	b = binary.LittleEndian.AppendUint64(b, h.Client)
	return append(b, h.Node...)
}

// ParseHello decodes a hello message.
func ParseHello(p []byte) (Hello, error) {
	if len(p) < 16 {
		return Hello{}, fmt.Errorf("%w: hello of %d bytes", ErrTruncated, len(p))
	}
	n := int(binary.LittleEndian.Uint16(p[6:]))
	if len(p) != 16+n {
		return Hello{}, fmt.Errorf("%w: hello node ID of %d bytes in %d", ErrCorrupt, n, len(p)-16)
	}
	if r := Role(p[4]); r > RoleLedger || p[5] != 0 {
		return Hello{}, fmt.Errorf("%w: hello role %d", ErrCorrupt, r)
	}
	return Hello{Worker: binary.LittleEndian.Uint32(p), Role: Role(p[4]), Client: binary.LittleEndian.Uint64(p[8:]), Node: string(p[16:])}, nil
}

// Code is an error reply's code.
type Code uint16

// The error codes.
const (
	CodeStaleEpoch     Code = 1 // the sender's range map is older (or newer) than the server's; the header carries the server's epoch
	CodeNotOwner       Code = 2 // the server does not own some of the keys under this epoch
	CodeUnknownTable   Code = 3
	CodeBadRequest     Code = 4 // malformed or inconsistent request
	CodeUnknownKeySet  Code = 5 // a cached key list the server does not hold; resend the keys
	CodeShuttingDown   Code = 6
	CodeNotConfigured  Code = 7 // the server has no configuration yet
	CodeTooManyRefused Code = 8
)

// AppendError encodes an error reply.
func AppendError(b []byte, c Code, msg string) []byte {
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(c))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(msg)))
	return append(b, msg...)
}

// ParseError decodes an error reply.
func ParseError(p []byte) (Code, string, error) {
	if len(p) < 4 {
		return 0, "", fmt.Errorf("%w: error reply of %d bytes", ErrTruncated, len(p))
	}
	n := int(binary.LittleEndian.Uint16(p[2:]))
	if len(p) != 4+n {
		return 0, "", fmt.Errorf("%w: error message of %d bytes in %d", ErrCorrupt, n, len(p)-4)
	}
	return Code(binary.LittleEndian.Uint16(p)), string(p[4:]), nil
}
