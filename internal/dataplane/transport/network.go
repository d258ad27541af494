package transport

import (
	"context"
	"net"
	"time"
)

// Network makes connections: TCP by default; an in-memory network in simulations.
type Network interface {
	Dial(ctx context.Context, addr string) (net.Conn, error)
	Listen(addr string) (net.Listener, error)
}

// TCP is the default Network: real TCP sockets.
var TCP Network = tcpNetwork{}

type tcpNetwork struct{}

func (tcpNetwork) Dial(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{KeepAlive: 5 * time.Second}
	return d.DialContext(ctx, "tcp", addr)
}

func (tcpNetwork) Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// OrTCP returns n, or TCP when n is nil.
func OrTCP(n Network) Network {
	if n == nil {
		return TCP
	}
	return n
}
