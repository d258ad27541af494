package tlsnet

import (
	"bufio"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/terrace-ml/terrace/internal/security/gcm"
)

// ErrRecord: a record after the handshake failed to open (its tag did
// not match: corrupted, replayed, reordered or forged) or was malformed.
var ErrRecord = errors.New("tls: bad record")

const (
	// alpnRecords is the ALPN protocol under which both ends switch to
	// this file's records once the handshake is over.
	alpnRecords = "terrace-records/1"
	// exporterLabel names the keying material (RFC 8446 §7.5).
	exporterLabel = "EXPORTER-terrace-records-v1"

	recordHeader = 4
	recordTag    = 16
	// maxRecord bounds a record's plaintext: the read-ahead buffer holds a
	// whole record, and a receiver allocates nothing for a length it reads.
	maxRecord = 256 << 10
	// smallPiece: buffers shorter than this (frame headers, small frames)
	// are gathered into one record; longer ones are sealed from where
	// they lie.
	smallPiece = 4 << 10
	// flushAt: the sealed batch goes out in one write once this long.
	flushAt = 1 << 20
	// rekeyBytes of plaintext under a key before both ends move to the
	// next one.
	rekeyBytes = 1 << 32
)

// The read-ahead holds a whole record (readRecord peeks at it).
var _ [readAhead - (recordHeader + maxRecord + recordTag)]struct{}

// recHalf is one direction's keys and sequence.
type recHalf struct {
	secret  []byte
	aead    cipher.AEAD
	iv      [12]byte
	nonce   [12]byte
	seq     uint64
	bytes   uint64 // plaintext sealed or opened under the current key
	rekeyAt uint64
	gen     int // keys used so far, after the first
}

func newHalf(secret []byte, rekeyAt uint64) (*recHalf, error) {
	h := &recHalf{rekeyAt: rekeyAt}
	return h, h.setKey(secret)
}

func (h *recHalf) setKey(secret []byte) error {
	key, err := hkdf.Expand(sha256.New, secret, "key", 16)
	if err != nil {
		return err
	}
	iv, err := hkdf.Expand(sha256.New, secret, "iv", len(h.iv))
	if err != nil {
		return err
	}
	// gcm.New is crypto/cipher's AES-GCM byte for byte, but seals and
	// opens a bulk record several times as fast on a CPU with VAES
	// (docs/design/security.md, "AES-GCM on 512-bit registers").
	aead, err := gcm.New(key)
	if err != nil {
		return err
	}
	h.secret, h.aead, h.seq, h.bytes = secret, aead, 0, 0
	copy(h.iv[:], iv)
	return nil
}

// next returns the nonce of the next record: the IV xor the sequence.
func (h *recHalf) next() []byte {
	h.nonce = h.iv
	for i := range 8 {
		h.nonce[4+i] ^= byte(h.seq >> (56 - 8*i))
	}
	return h.nonce[:]
}

// advance counts a record of n plaintext bytes and rekeys when due.
func (h *recHalf) advance(n int) error {
	h.seq++
	h.bytes += uint64(n)
	if h.bytes < h.rekeyAt {
		return nil
	}
	s, err := hkdf.Expand(sha256.New, h.secret, "next", len(h.secret))
	if err != nil {
		return err
	}
	h.gen++
	return h.setKey(s)
}

// recConn carries a stream in records of its own after a TLS 1.3
// handshake (docs/design/security.md, "Bulk records after the
// handshake"). One goroutine may read while another writes.
type recConn struct {
	net.Conn               // the TCP connection under TLS
	r        *bufio.Reader // read-ahead, shared with the handshake
	tc       *tls.Conn     // decodes a TLS alert met where a record belongs
	peer     string

	rmu   sync.Mutex
	rx    *recHalf
	plain []byte // opened, not yet read
	pbuf  []byte
	rerr  error

	wmu  sync.Mutex
	tx   *recHalf
	out  []byte
	werr error
}

// newRecConn switches a finished handshake to records; client says
// which end this is (the dialler seals with the first secret).
func newRecConn(nc net.Conn, r *bufio.Reader, tc *tls.Conn, client bool, peer string, rekeyAt uint64) (*recConn, error) {
	cs := tc.ConnectionState()
	if cs.Version != tls.VersionTLS13 {
		return nil, fmt.Errorf("%w: %s negotiated records over %s, not TLS 1.3", ErrPeerRefused, peer, tls.VersionName(cs.Version))
	}
	km, err := cs.ExportKeyingMaterial(exporterLabel, nil, 64)
	if err != nil {
		return nil, fmt.Errorf("tls: keys for records with %s: %w", peer, err)
	}
	txs, rxs := km[:32], km[32:]
	if !client {
		txs, rxs = rxs, txs
	}
	tx, err := newHalf(txs, rekeyAt)
	if err != nil {
		return nil, err
	}
	rx, err := newHalf(rxs, rekeyAt)
	if err != nil {
		return nil, err
	}
	return &recConn{Conn: nc, r: r, tc: tc, peer: peer, rx: rx, tx: tx}, nil
}

// Authenticated implements transport.Authenticator.
func (c *recConn) Authenticated() bool { return true }

// ConnectionState is the handshake's (the peer's certificates).
func (c *recConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

func (c *recConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	if len(c.plain) > 0 {
		n := copy(p, c.plain)
		c.plain = c.plain[n:]
		return n, nil
	}
	if c.rerr != nil {
		return 0, c.rerr
	}
	n := 0
	for n < len(p) && len(c.plain) == 0 {
		// After the first record, go on only with records already whole
		// in the buffer that fit: never wait with bytes in hand.
		if n > 0 && !c.wholeFits(len(p)-n) {
			break
		}
		k, torn, err := c.readRecord(p[n:])
		n += k
		if err != nil {
			// A deadline that passed while no record had been begun
			// (net/http's background read, a caller's poll) leaves the
			// stream whole: the next Read goes on. Anything else ends it.
			var ne net.Error
			if torn || !errors.As(err, &ne) || !ne.Timeout() {
				c.rerr = err
			}
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
	}
	return n, nil
}

// wholeFits reports whether the next record is whole in the buffer and
// its plaintext fits in space bytes.
func (c *recConn) wholeFits(space int) bool {
	if c.r.Buffered() < recordHeader {
		return false
	}
	h, _ := c.r.Peek(recordHeader)
	n := int(binary.BigEndian.Uint32(h))
	return h[0] == 0 && n <= space && c.r.Buffered() >= recordHeader+n+recordTag
}

// readRecord reads and opens one record into p, keeping what does not
// fit for the next Read; torn says it failed after taking part of a
// record off the stream.
func (c *recConn) readRecord(p []byte) (n int, torn bool, err error) {
	h, err := c.r.Peek(recordHeader)
	if err != nil {
		return 0, false, truncated(err, len(h))
	}
	if h[0] != 0 {
		if h[0] >= 0x14 && h[0] <= 0x17 && len(h) > 1 && h[1] == 3 {
			return 0, true, c.tlsRecord()
		}
		return 0, true, fmt.Errorf("%w from %s: header %x", ErrRecord, c.peer, h)
	}
	n = int(binary.BigEndian.Uint32(h))
	if n == 0 || n > maxRecord {
		return 0, true, fmt.Errorf("%w from %s: length %d (1 to %d)", ErrRecord, c.peer, n, maxRecord)
	}
	var hdr [recordHeader]byte
	copy(hdr[:], h)
	total := recordHeader + n + recordTag
	if len(p) >= n+recordTag && c.r.Buffered() < total {
		// Read the rest of the record straight into p and open it there.
		c.r.Discard(recordHeader)
		k := 0
		if b := c.r.Buffered(); b > 0 {
			k, _ = c.r.Read(p[:b])
		}
		if m, err := io.ReadFull(c.Conn, p[k:n+recordTag]); err != nil {
			return 0, true, truncated(err, recordHeader+k+m)
		}
		if _, err := c.open(p, p[:n+recordTag], hdr[:]); err != nil {
			return 0, true, err
		}
		return n, false, nil
	}
	rec, err := c.r.Peek(total)
	if err != nil {
		return 0, false, truncated(err, len(rec))
	}
	dst := p
	if len(p) < n {
		if cap(c.pbuf) < n {
			c.pbuf = make([]byte, n)
		}
		dst = c.pbuf[:n]
	}
	pt, err := c.open(dst, rec[recordHeader:], hdr[:])
	if err != nil {
		return 0, true, err
	}
	c.r.Discard(total)
	if len(p) < n {
		k := copy(p, pt)
		c.plain = pt[k:]
		return k, false, nil
	}
	return n, false, nil
}

// open opens ct (a record's ciphertext and tag) into dst[:0] under the
// next nonce, and counts the record.
func (c *recConn) open(dst, ct, hdr []byte) ([]byte, error) {
	pt, err := c.rx.aead.Open(dst[:0], c.rx.next(), ct, hdr)
	if err != nil {
		return nil, fmt.Errorf("%w from %s: %v", ErrRecord, c.peer, err)
	}
	return pt, c.rx.advance(len(pt))
}

// tlsRecord lets crypto/tls read the TLS record met where a record of
// ours belongs: the peer's alert (a refused certificate, or its close).
func (c *recConn) tlsRecord() error {
	if c.tc != nil {
		var b [1]byte
		_, err := c.tc.Read(b[:])
		switch {
		case errors.Is(err, io.EOF):
			return io.EOF // the peer's close_notify
		case err != nil && strings.Contains(err.Error(), "remote error: tls:"):
			return fmt.Errorf("%w: %s refused this node's certificate: %w", ErrPeerRefused, c.peer, err)
		case err != nil:
			return err
		}
	}
	return fmt.Errorf("%w from %s: a TLS record where a record was due", ErrRecord, c.peer)
}

// truncated maps the end of the stream: at a record's boundary it is the
// stream's end, inside one it is a truncation.
func truncated(err error, got int) error {
	if errors.Is(err, io.EOF) && got > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}

// CloseWrite half-closes the TCP connection: the peer reads the end of
// the stream after the last record (crypto/tls would send an alert).
func (c *recConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *recConn) Write(p []byte) (int, error) {
	b := net.Buffers{p}
	n, err := c.WriteBuffers(&b)
	return int(n), err
}

// WriteBuffers implements transport.BuffersWriter: small buffers are
// gathered into one record, large ones sealed from where they lie, and
// the records sent in writes of about flushAt bytes.
func (c *recConn) WriteBuffers(b *net.Buffers) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	bufs := *b
	*b = nil
	if c.werr != nil {
		return 0, c.werr
	}
	var n int64
	pend := -1 // where the open record of small buffers starts in out
	for _, p := range bufs {
		if len(p) < smallPiece {
			if pend >= 0 && len(c.out)-pend-recordHeader+len(p) > maxRecord {
				if err := c.sealPending(pend); err != nil {
					return n, err
				}
				pend = -1
			}
			if pend < 0 {
				pend = len(c.out)
				c.out = append(c.out, 0, 0, 0, 0)
			}
			c.out = append(c.out, p...)
			n += int64(len(p))
			continue
		}
		if pend >= 0 {
			if err := c.sealPending(pend); err != nil {
				return n, err
			}
			pend = -1
		}
		for len(p) > 0 {
			k := min(len(p), maxRecord)
			if err := c.seal(p[:k]); err != nil {
				return n, err
			}
			p = p[k:]
			n += int64(k)
		}
	}
	if pend >= 0 {
		if err := c.sealPending(pend); err != nil {
			return n, err
		}
	}
	return n, c.flush()
}

// seal appends a record of pt, sealed from where it lies.
func (c *recConn) seal(pt []byte) error {
	var hdr [recordHeader]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(pt)))
	// The batch grows to what the connection sends (an API call's few
	// hundred bytes, a bulk stream's flushAt and a record), then stays.
	c.out = slices.Grow(c.out, recordHeader+len(pt)+recordTag)
	c.out = append(c.out, hdr[:]...)
	c.out = c.tx.aead.Seal(c.out, c.tx.next(), pt, hdr[:])
	return c.afterSeal(len(pt))
}

// sealPending seals in place the record of small buffers gathered at
// out[pend:].
func (c *recConn) sealPending(pend int) error {
	c.out = slices.Grow(c.out, recordTag)
	pt := c.out[pend+recordHeader:]
	var hdr [recordHeader]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(pt)))
	copy(c.out[pend:], hdr[:])
	c.out = c.tx.aead.Seal(c.out[:pend+recordHeader], c.tx.next(), pt, hdr[:])
	return c.afterSeal(len(pt))
}

// afterSeal counts a record of n plaintext bytes just sealed into the batch,
// and sends the batch once it is long enough.
func (c *recConn) afterSeal(n int) error {
	if err := c.tx.advance(n); err != nil {
		return err
	}
	if len(c.out) >= flushAt {
		return c.flush()
	}
	return nil
}

func (c *recConn) flush() error {
	if len(c.out) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.out)
	c.out = c.out[:0]
	if err != nil {
		c.werr = err
	}
	return err
}
