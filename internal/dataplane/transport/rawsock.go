package transport

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawSock reads and writes a plain TCP connection with raw system calls
// (docs/design/dataplane.md, "Raw system calls on the sockets"). The
// socket is non-blocking, as the runtime's poller leaves it: read(2),
// readv(2) and writev(2) copy what they can and return, EAGAIN when there
// is nothing to copy, and RawConn then parks the goroutine on the poller
// until the socket is ready (honouring deadlines) as the net package does.
// What differs is that the runtime does not count the call as a system
// call: a copy of a megabyte or two takes 100-300 µs, and the runtime's
// monitor hands a processor whose goroutine has been in a system call
// for 20 µs to another thread, which on a busy connection kept the
// monitor waking every 20 µs and threads handing processors to each
// other, several percent of a push's processor time.
type rawSock struct {
	tc *net.TCPConn
	rc syscall.RawConn

	// The calls, bound once (a closure per call escaped to the heap
	// through RawConn), and their buffers and results: the reader's and
	// the writer's apart, since one goroutine reads while another writes.
	read, writev func(fd uintptr) bool
	p            []byte
	rn           int
	rerr         syscall.Errno
	iov          []unix.Iovec
	wn           int
	werr         syscall.Errno
}

// newRawSock returns a rawSock for a plain TCP connection, or nil for any
// other.
func newRawSock(nc net.Conn) *rawSock {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	s := &rawSock{tc: tc, rc: rc}
	s.read, s.writev = s.readFD, s.writevFD
	return s
}

// opError wraps errno from the call named as the net package wraps a
// failed call on a socket ("read tcp A->B: writev: broken pipe").
func (s *rawSock) opError(call string, errno syscall.Errno) error {
	op := "read"
	if call == "writev" {
		op = "write"
	}
	return &net.OpError{Op: op, Net: "tcp", Source: s.tc.LocalAddr(), Addr: s.tc.RemoteAddr(), Err: os.NewSyscallError(call, errno)}
}

// Read implements io.Reader: at least one byte unless it fails, io.EOF
// at the end of the stream.
func (s *rawSock) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.p = p
	err := s.rc.Read(s.read)
	s.p = nil
	if err != nil {
		return 0, err // RawConn's own *net.OpError
	}
	if s.rerr != 0 {
		return 0, s.opError("read", s.rerr)
	}
	if s.rn == 0 {
		return 0, io.EOF
	}
	return s.rn, nil
}

// readFD is one read(2) of s.p, for RawConn.Read: it reports false to wait
// for the socket to be readable again.
func (s *rawSock) readFD(fd uintptr) bool {
	var done bool
	s.rn, s.rerr, done = rawCall(unix.SYS_READ, fd, unsafe.Pointer(&s.p[0]), len(s.p))
	return done
}

// rawCall makes the raw system call trap(fd, p, n), a read or a write of
// the socket, again while a signal interrupts it, and returns the bytes
// it copied (0 on an error), its errno, and whether it is done: false on
// EAGAIN, for RawConn to wait until the socket is ready.
func rawCall(trap, fd uintptr, p unsafe.Pointer, n int) (copied int, errno syscall.Errno, done bool) {
	for {
		r, _, e := unix.RawSyscall(trap, fd, uintptr(p), uintptr(n))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e, e != unix.EAGAIN
		}
		return int(r), 0, true
	}
}

// WriteBuffers implements BuffersWriter: it writes every buffer of b,
// consuming them as net.Buffers.WriteTo does, in as few writev(2) calls
// as the socket takes.
func (s *rawSock) WriteBuffers(b *net.Buffers) (int64, error) {
	var total int64
	for len(*b) > 0 {
		s.iov = iovecs(s.iov[:0], *b)
		if len(s.iov) == 0 {
			*b = (*b)[:0]
			break
		}
		err := s.rc.Write(s.writev)
		clear(s.iov) // drop the references to the caller's memory
		if err != nil {
			return total, err // RawConn's own *net.OpError
		}
		if s.werr != 0 {
			return total, s.opError("writev", s.werr)
		}
		total += int64(s.wn)
		consume(b, s.wn)
	}
	return total, nil
}

// writevFD writes s.iov with writev(2), for RawConn.Write: it reports false
// to wait for the socket to be writable again when it took nothing.
func (s *rawSock) writevFD(fd uintptr) bool {
	var done bool
	s.wn, s.werr, done = rawCall(unix.SYS_WRITEV, fd, unsafe.Pointer(&s.iov[0]), len(s.iov))
	return done
}

// consume drops the first n bytes of b.
func consume(b *net.Buffers, n int) {
	for len(*b) > 0 {
		l := len((*b)[0])
		if l > n {
			(*b)[0] = (*b)[0][n:]
			return
		}
		n -= l
		(*b)[0] = nil
		*b = (*b)[1:]
	}
}

// RawTCP returns nc with its reads and writes made as a Conn makes them,
// raw system calls (rawSock), or nc itself where it is not plain TCP: the
// raw-TCP ceilings of `terrace bench wire` take the same path as the
// connections they are compared with, so that the ratios measure the
// protocol and not how the runtime makes a system call.
func RawTCP(nc net.Conn) net.Conn {
	s := newRawSock(nc)
	if s == nil {
		return nc
	}
	return &rawTCP{TCPConn: s.tc, s: s}
}

// rawTCP is RawTCP's connection: a *net.TCPConn with rawSock's reads and
// writes. Like any net.Conn it may be read and written from several
// goroutines at once: reads take rmu and writes wmu, since rawSock keeps
// one reader's and one writer's state.
type rawTCP struct {
	*net.TCPConn
	s        *rawSock
	rmu, wmu sync.Mutex
	wb       [1][]byte // Write's one buffer
}

func (c *rawTCP) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return c.s.Read(p)
}

func (c *rawTCP) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wb[0] = p
	b := net.Buffers(c.wb[:])
	n, err := c.s.WriteBuffers(&b)
	c.wb[0] = nil // drop the reference to the caller's memory
	return int(n), err
}
