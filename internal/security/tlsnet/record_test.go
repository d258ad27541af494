package tlsnet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/security/pki"
)

// streamConn is a net.Conn over a reader and a writer: records written
// by one recConn are captured, edited, and read by another.
type streamConn struct {
	net.Conn
	r io.Reader
	w io.Writer
}

func (s streamConn) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s streamConn) Write(p []byte) (int, error) { return s.w.Write(p) }

// sealed returns the records of bufs, written by a sender whose keys
// match reader's.
func sealed(t testing.TB, rekeyAt uint64, bufs ...[]byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w := recEnd(t, streamConn{w: &out}, true, rekeyAt)
	b := net.Buffers(bufs)
	if _, err := w.WriteBuffers(&b); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// recEnd is one end of a record connection with fixed secrets: the
// dialler's (sender) or the listener's (reader).
func recEnd(t testing.TB, nc net.Conn, dialler bool, rekeyAt uint64) *recConn {
	t.Helper()
	a, b := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	if !dialler {
		a, b = b, a
	}
	tx, err := newHalf(a, rekeyAt)
	if err != nil {
		t.Fatal(err)
	}
	rx, err := newHalf(b, rekeyAt)
	if err != nil {
		t.Fatal(err)
	}
	return &recConn{Conn: nc, r: bufio.NewReaderSize(nc, readAhead), peer: "peer", tx: tx, rx: rx}
}

func reader(t testing.TB, stream []byte, rekeyAt uint64) *recConn {
	return recEnd(t, streamConn{r: bytes.NewReader(stream)}, false, rekeyAt)
}

// readAll reads r to its end in reads of the given sizes, in turn.
func readAll(r io.Reader, sizes ...int) ([]byte, error) {
	var got []byte
	for i := 0; ; i++ {
		p := make([]byte, sizes[i%len(sizes)])
		n, err := r.Read(p)
		got = append(got, p[:n]...)
		if err != nil {
			return got, err
		}
	}
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestRecordsRoundTrip: any mix of small and large buffers comes out
// whole and in order, whatever sizes the reader asks for, across
// rekeyings.
func TestRecordsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{1, 24, 100, smallPiece - 1, smallPiece, 5000, maxRecord - 1, maxRecord, maxRecord + 1, 3 << 20}
	var bufs [][]byte
	var want []byte
	for range 40 {
		b := randomBytes(rng, sizes[rng.IntN(len(sizes))])
		bufs = append(bufs, b)
		want = append(want, b...)
	}
	for _, rekeyAt := range []uint64{rekeyBytes, 100 << 10} {
		stream := sealed(t, rekeyAt, bufs...)
		for _, reads := range [][]int{{7}, {64 << 10}, {1 << 20, 13}, {4 << 20}, {maxRecord + recordTag}} {
			r := reader(t, stream, rekeyAt)
			got, err := readAll(r, reads...)
			if err != io.EOF {
				t.Fatalf("rekey at %d, reads %v: %v", rekeyAt, reads, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("rekey at %d, reads %v: %d bytes read, want %d (or different bytes)", rekeyAt, reads, len(got), len(want))
			}
			if rekeyAt < rekeyBytes && r.rx.gen == 0 {
				t.Fatalf("no rekeying after %d bytes", len(want))
			}
		}
	}
}

// TestRecordsRekeyChangesKeys: a reader that does not rekey where the
// sender did cannot read on: the keys really change.
func TestRecordsRekeyChangesKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	stream := sealed(t, 64<<10, randomBytes(rng, 1<<20))
	_, err := readAll(reader(t, stream, rekeyBytes), 1<<20)
	if !errors.Is(err, ErrRecord) {
		t.Fatalf("read past the sender's rekeying with the old key: %v, want ErrRecord", err)
	}
}

// TestRecordsRefuseTampering: a flipped bit anywhere in a record (its
// length, its ciphertext, its tag), a record replayed, a record dropped
// or two swapped, is refused with ErrRecord; nothing forged is returned.
func TestRecordsRefuseTampering(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	a, b := randomBytes(rng, 1000), randomBytes(rng, 70<<10)
	ra, rb := sealed(t, rekeyBytes, a), sealed(t, rekeyBytes, b)
	// The second record of a stream, alone, is sealed under sequence 1.
	both := sealed(t, rekeyBytes, a, b)
	rb1 := both[len(ra):]
	for _, tc := range []struct {
		name   string
		stream []byte
		good   int // bytes of plaintext that may come out before the refusal
	}{
		{"ciphertext bit", flip(ra, recordHeader+10), 0},
		{"tag bit", flip(ra, len(ra)-1), 0},
		{"length down", flip(ra, 3), 0},
		{"large record's ciphertext", flip(rb, recordHeader+(60<<10)), 0},
		{"replayed", append(append([]byte{}, ra...), ra...), len(a)},
		{"dropped", rb1, 0},
		{"swapped", append(append([]byte{}, rb1...), ra...), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{100, 1 << 20} {
				got, err := readAll(reader(t, tc.stream, rekeyBytes), size)
				if !errors.Is(err, ErrRecord) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("reads of %d: %v, want ErrRecord", size, err)
				}
				if len(got) > tc.good {
					t.Fatalf("reads of %d: %d bytes came out of a forged stream", size, len(got))
				}
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte{}, b...)
	c[i] ^= 0x10
	return c
}

// TestRecordsRefuseBadHeaders: a length out of bounds or a first byte
// that is not ours is refused before anything is read or allocated for it.
func TestRecordsRefuseBadHeaders(t *testing.T) {
	for _, h := range [][]byte{{0, 0, 0, 0}, {0, 0x10, 0, 0}, {0xff, 0xff, 0xff, 0xff}, {0x47, 0x45, 0x54, 0x20}} {
		_, err := readAll(reader(t, h, rekeyBytes), 1<<20)
		if !errors.Is(err, ErrRecord) {
			t.Errorf("header %x: %v, want ErrRecord", h, err)
		}
	}
}

// TestRecordsTruncated: a stream cut inside a record is an unexpected
// end; cut between records, the end.
func TestRecordsTruncated(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	stream := sealed(t, rekeyBytes, randomBytes(rng, 100), randomBytes(rng, 300<<10))
	first := recordHeader + 100 + recordTag
	for _, cut := range []int{2, first - 1, first + 2, first + 50<<10, len(stream) - 1} {
		for _, size := range []int{64, 1 << 20} {
			if _, err := readAll(reader(t, stream[:cut], rekeyBytes), size); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("cut at %d, reads of %d: %v, want io.ErrUnexpectedEOF", cut, size, err)
			}
		}
	}
	if _, err := readAll(reader(t, stream[:first], rekeyBytes), 64); err != io.EOF {
		t.Errorf("cut between records: %v, want io.EOF", err)
	}
}

// TestRecordsNegotiated: two Terrace nodes switch to records after the
// handshake, and a large exchange both ways at once arrives whole; a
// client that is not Terrace (curl, Prometheus: ALPN h2, http/1.1) stays
// on crypto/tls's records.
func TestRecordsNegotiated(t *testing.T) {
	p := makePKI(t)
	// The server echoes everything back.
	addr, accepted := serve(t, p, func(c net.Conn) { io.Copy(c, c) })
	cli := New(nil, source(t, pki.FilesIn(filepath.Join(p.ca, "cli"))), nil)
	c, err := cli.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*recConn); !ok {
		t.Fatalf("a Terrace dial gave %T, not records", c)
	}
	want := randomBytes(rand.New(rand.NewPCG(9, 10)), 8<<20)
	errc := make(chan error, 1)
	go func() {
		b := net.Buffers{want[:10], want[10 : 5<<20], want[5<<20:]}
		_, err := c.(*recConn).WriteBuffers(&b)
		errc <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the echo differs from what was sent")
	}
	c.Close()
	// handshake (its sync.Once) orders the test's read of rec after the
	// serving goroutine's write.
	if sc := (<-accepted).(*serverConn); sc.handshake() != nil || sc.rec == nil {
		t.Fatal("the listener did not switch to records")
	}

	// A standard TLS client with the cluster's certificate.
	kp, err := tls.LoadX509KeyPair(filepath.Join(p.ca, "cli", pki.NodeCert), filepath.Join(p.ca, "cli", pki.NodeKey))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: cli.ClientTLS().RootCAs, ServerName: "127.0.0.1", Certificates: []tls.Certificate{kp}, NextProtos: []string{"h2", "http/1.1"}}
	sc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if np := sc.ConnectionState().NegotiatedProtocol; np != "http/1.1" {
		t.Fatalf("a standard client negotiated %q, want http/1.1", np)
	}
	if _, err := sc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(sc, b); err != nil || string(b) != "ping" {
		t.Fatalf("standard client's echo %q, %v", b, err)
	}
}

// TestRecordsNameARefusal: under TLS 1.3 the server refuses a client's
// certificate after the client's handshake is over; the alert arrives
// where the first record is due, and the client still names it.
func TestRecordsNameARefusal(t *testing.T) {
	p := makePKI(t)
	var log lockedBuf
	addr, results, _ := listen(t, p, "srv", &log)
	// A node of another CA that trusts this cluster's CA too, so that its
	// own handshake succeeds.
	f := pki.FilesIn(filepath.Join(p.other, "stranger"))
	f.CA = filepath.Join(p.ca, pki.CACert)
	stranger := New(nil, source(t, f), nil)
	c, err := stranger.Dial(context.Background(), addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if _, ok := c.(*recConn); !ok {
		t.Fatalf("dial gave %T, not records", c)
	}
	err = exchange(c)
	if !errors.Is(err, ErrPeerRefused) || !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Errorf("client: %v, want ErrPeerRefused naming the unknown authority", err)
	}
	if serr := <-results; !errors.Is(serr, ErrRefused) {
		t.Errorf("server: %v", serr)
	}
}

// FuzzRecordRead: whatever a peer sends after the handshake, the reader
// returns an error or bytes it sealed, and never panics or hangs.
func FuzzRecordRead(f *testing.F) {
	rng := rand.New(rand.NewPCG(11, 12))
	a, b := randomBytes(rng, 30), randomBytes(rng, 5000)
	valid := sealed(f, 1<<10, a, b)
	plain := append(append([]byte{}, a...), b...)
	f.Add(valid)
	f.Add(valid[:7])
	f.Add([]byte{0, 0, 0, 1})
	f.Add([]byte{0x15, 3, 3, 0, 2, 2, 40})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := readAll(reader(t, data, 1<<10), 100)
		if err == nil {
			t.Fatal("readAll ended without an error")
		}
		if len(got) > len(data) {
			t.Fatalf("%d bytes out of %d in", len(got), len(data))
		}
		if !bytes.HasPrefix(plain, got) {
			t.Fatalf("%d bytes came out that were never sealed", len(got))
		}
	})
}

// TestRecordsReadAfterDeadline: a read deadline that passes with no
// record begun (net/http's server aborts its background read of an idle
// connection this way before every response) leaves the connection
// usable; before, it ended it, and every API call dialled anew.
func TestRecordsReadAfterDeadline(t *testing.T) {
	p := makePKI(t)
	var log lockedBuf
	addr, results, _ := listen(t, p, "srv", &log)
	cli := New(nil, source(t, pki.FilesIn(filepath.Join(p.ca, "cli"))), nil)
	c, err := cli.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(-time.Second))
	var b [1]byte
	if _, err := c.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	if err := exchange(c); err != nil {
		t.Fatalf("after a passed deadline: %v", err)
	}
	if err := <-results; err != nil {
		t.Fatal(err)
	}
}

// TestRecordsCloseWrite: a listener's half-close (net/http's before it
// closes) reads as the end of the stream after the last record, not as
// a bad record.
func TestRecordsCloseWrite(t *testing.T) {
	p := makePKI(t)
	addr, _ := serve(t, p, func(c net.Conn) {
		c.Write([]byte("bye"))
		c.(interface{ CloseWrite() error }).CloseWrite()
		io.Copy(io.Discard, c)
	})
	cli := New(nil, source(t, pki.FilesIn(filepath.Join(p.ca, "cli"))), nil)
	c, err := cli.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "bye" {
		t.Fatalf("read %q, %v; want \"bye\" and the end", got, err)
	}
}

// serve listens as node "srv" and handles each connection it accepts
// with handle, then closes it; each accepted connection is also sent on
// the channel returned (which holds two).
func serve(t *testing.T, p pkis, handle func(net.Conn)) (string, <-chan net.Conn) {
	t.Helper()
	srv := New(nil, source(t, pki.FilesIn(filepath.Join(p.ca, "srv"))), nil)
	ln, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- c:
			default:
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String(), accepted
}
