package link

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Network is one emulated machine's network: it binds and dials from the
// machine's own loopback address (127.0.0.N; Linux routes all of 127/8 to
// loopback), and paces on the machine's Link every connection whose other
// end is another address, so that two nodes of one machine talk unpaced.
// It is a transport.Network.
type Network struct {
	ip   net.IP
	link *Link
}

// NewNetwork returns the network of the machine at ip, paced by l.
func NewNetwork(ip string, l *Link) (*Network, error) {
	p := net.ParseIP(ip)
	if p == nil || !p.IsLoopback() {
		return nil, fmt.Errorf("link: %q is not a loopback address", ip)
	}
	return &Network{ip: p, link: l}, nil
}

// Link returns the machine's link.
func (n *Network) Link() *Link { return n.link }

// Dial connects to addr from the machine's address.
func (n *Network) Dial(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{KeepAlive: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: n.ip}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return n.wrap(c), nil
}

// Listen listens on addr's port at the machine's address (addr's host is
// replaced: every node of the machine listens there).
func (n *Network) Listen(addr string) (net.Listener, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("link: listen %q: %w", addr, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(n.ip.String(), port))
	if err != nil {
		return nil, err
	}
	return &machineListener{Listener: ln, n: n}, nil
}

func (n *Network) wrap(c net.Conn) net.Conn {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && a.IP.Equal(n.ip) {
		return c
	}
	return n.link.Wrap(c, "data")
}

type machineListener struct {
	net.Listener
	n *Network
}

func (ln *machineListener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return ln.n.wrap(c), nil
}
