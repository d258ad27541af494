package transport

import (
	"net"
	"testing"
)

// TestHeld: a held port is the holder's from Hold on, the first Listen of
// its address gets the very listener held, and Close lets go of those
// never taken.
func TestHeld(t *testing.T) {
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	taken, left := free(), free()
	h := NewHeld(nil)
	for _, addr := range []string{taken, left} {
		if err := h.Hold(addr); err != nil {
			t.Fatal(err)
		}
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			t.Fatalf("another listen on held %s succeeded", addr)
		}
	}
	ln, err := h.Listen(taken)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ln.Addr().String() != taken {
		t.Fatalf("Listen(%s) listens on %s", taken, ln.Addr())
	}
	if again, err := h.Listen(taken); err == nil {
		again.Close()
		t.Fatalf("a second Listen(%s) got a listener while the first is open", taken)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if ln, err := net.Listen("tcp", left); err != nil {
		t.Fatalf("%s not let go by Close: %v", left, err)
	} else {
		ln.Close()
	}
	c, err := net.Dial("tcp", taken)
	if err != nil {
		t.Fatalf("the listener taken was closed by Close: %v", err)
	}
	c.Close()
}
