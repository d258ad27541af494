package link

import (
	"io"
	"net"
	"testing"
)

// TestNetworkPacesOnlyOtherMachines: a connection between two nodes of
// one emulated machine (one loopback address) is not paced; one to
// another machine's address is.
func TestNetworkPacesOnlyOtherMachines(t *testing.T) {
	a, err := NewNetwork("127.0.0.1", New(1e6, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := a.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	same, err := a.Dial(t.Context(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer same.Close()
	if _, ok := same.(*conn); ok {
		t.Error("a connection within one machine was wrapped by its link")
	}
	b, err := NewNetwork("127.0.0.2", New(1e6, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.Dial(t.Context(), ln.Addr().String())
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.2 on this host: %v", err)
	}
	defer other.Close()
	if _, ok := other.(*conn); !ok {
		t.Error("a connection to another machine was not paced by the link")
	}
	if got := other.LocalAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.2" {
		t.Errorf("dialled from %s, want the machine's 127.0.0.2", got)
	}
	if _, err := NewNetwork("10.0.0.1", New(0, Options{})); err == nil {
		t.Error("a non-loopback machine address was accepted")
	}
}
