package transport

import (
	"bufio"
	"io"
	"net"
	"syscall"

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
	br *bufio.Reader
	rc syscall.RawConn
}

// newVecReader returns a vecReader for a plain TCP connection, or nil
// for any other (TLS decrypts in user space anyway).
func newVecReader(nc net.Conn, br *bufio.Reader) *vecReader {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return &vecReader{br: br, rc: rc}
}

// ReadVec reads into bufs in order and returns how many bytes it read,
// at least one unless it fails; io.EOF at the end of the stream.
func (v *vecReader) ReadVec(bufs [][]byte) (int, error) {
	if v.br.Buffered() > 0 {
		return v.br.Read(bufs[0])
	}
	if len(bufs) > maxIovecs {
		bufs = bufs[:maxIovecs]
	}
	var n int
	var err error
	if rerr := v.rc.Read(func(fd uintptr) bool {
		for {
			n, err = unix.Readv(int(fd), bufs)
			if err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	}); rerr != nil {
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
