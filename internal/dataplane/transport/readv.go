package transport

import (
	"bufio"
	"io"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxIovecs is the most buffers one readv(2) takes (Linux's IOV_MAX).
const maxIovecs = 1024

// vecReader reads a payload into several buffers at once: what the
// read-ahead already holds first, then readv(2) straight from the socket,
// so that a pull's reply over several runs (a range spread over servers)
// lands in the caller's runs with the kernel's copy only, where reading it
// into one buffer and scattering it from there copied it once more.
type vecReader struct {
	br  *bufio.Reader
	rc  syscall.RawConn
	iov []unix.Iovec // reused: x/sys's Readv builds a new array every call
	// readv, bound once, and its results: a closure per call escaped to
	// the heap through RawConn.Read.
	read func(fd uintptr) bool
	n    int
	err  error
}

// newVecReader returns a vecReader over rc, a plain TCP connection's
// (rawSock's: TLS decrypts in user space anyway), behind br.
func newVecReader(rc syscall.RawConn, br *bufio.Reader) *vecReader {
	v := &vecReader{br: br, rc: rc}
	v.read = v.readv
	return v
}

// ReadVec reads into bufs in order and returns how many bytes it read,
// at least one unless it fails; io.EOF at the end of the stream.
func (v *vecReader) ReadVec(bufs [][]byte) (int, error) {
	if v.br.Buffered() > 0 {
		return v.br.Read(bufs[0])
	}
	v.iov = iovecs(v.iov[:0], bufs)
	if len(v.iov) == 0 {
		return 0, nil
	}
	rerr := v.rc.Read(v.read)
	clear(v.iov) // drop the references to the caller's memory
	n, err := v.n, v.err
	if rerr != nil {
		return 0, rerr
	}
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// readv is one readv(2) of v.iov into v.n and v.err, for RawConn.Read:
// it reports false to wait for the socket to be readable again. A raw
// system call, as rawSock's are.
func (v *vecReader) readv(fd uintptr) bool {
	n, errno, done := rawCall(unix.SYS_READV, fd, unsafe.Pointer(&v.iov[0]), len(v.iov))
	v.n, v.err = n, nil
	if errno != 0 {
		v.err = errno
	}
	return done
}

// iovecs appends to dst an iovec for each non-empty buffer of bufs, at
// most maxIovecs in all.
func iovecs(dst []unix.Iovec, bufs [][]byte) []unix.Iovec {
	for _, b := range bufs {
		if len(dst) == maxIovecs {
			break
		}
		if len(b) == 0 {
			continue
		}
		iov := unix.Iovec{Base: &b[0]}
		iov.SetLen(len(b))
		dst = append(dst, iov)
	}
	return dst
}
