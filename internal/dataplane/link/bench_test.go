package link

import (
	"io"
	"net"
	"testing"
	"time"
)

// loopbackPair is a TCP connection over loopback: the writer's end and
// the reader's.
func loopbackPair(b *testing.B) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	w, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	return w, <-acc
}

// throughput moves n bytes from w to r in 64 KiB writes and returns bytes
// per second.
func throughput(b *testing.B, w, r net.Conn, n int) float64 {
	done := make(chan struct{})
	go func() {
		io.CopyN(io.Discard, r, int64(n))
		close(done)
	}()
	buf := make([]byte, 64<<10)
	start := time.Now()
	for sent := 0; sent < n; sent += len(buf) {
		if _, err := w.Write(buf[:min(len(buf), n-sent)]); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkLoopback200Mbps measures a wrapped loopback pair against its
// 200 Mbit/s target (ratio: measured/target, 1 is exact) and the same pair
// unwrapped in the same run (the loopback's own speed, for scale). Both
// ends are wrapped, by two machines' links, as between two machines.
func BenchmarkLoopback200Mbps(b *testing.B) {
	const target = 200e6 / 8
	const n = 10 << 20
	w, r := loopbackPair(b)
	defer w.Close()
	defer r.Close()
	raw := throughput(b, w, r, 64<<20)
	lw := New(target, Options{}).Wrap(w, "data")
	lr := New(target, Options{}).Wrap(r, "data")
	// Empty the buckets first: a full one lets its depth (50 ms of the
	// rate) through at once, which is not the steady rate.
	throughput(b, lw, lr, 4<<20)
	b.ResetTimer()
	var sum float64
	for range b.N {
		sum += throughput(b, lw, lr, n)
	}
	b.ReportMetric(sum/float64(b.N)/target, "ratio")
	b.ReportMetric(sum/float64(b.N)/1e6, "MB/s")
	b.ReportMetric(raw/1e6, "raw-MB/s")
}
