package app

import (
	"errors"
	"net"
	"testing"
)

// A second listen on an address another holds is told apart from other
// failures on every OS (Windows says WSAEADDRINUSE, not EADDRINUSE): it
// is how a guard finds that another serves the UI, and uses that one.
func TestAddrInUse(t *testing.T) {
	first, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := net.Listen("tcp", first.Addr().String())
	if err == nil {
		second.Close()
		t.Fatal("a second listen on a held address succeeded")
	}
	if !addrInUse(err) {
		t.Fatalf("a listen on a held address is not told apart as in use: %v", err)
	}
	if addrInUse(errors.New("permission denied")) {
		t.Fatal("another failure counts as the address in use")
	}
	if _, err := net.Listen("tcp", "127.0.0.1:notaport"); err == nil || addrInUse(err) {
		t.Fatalf("a bad address counts as in use: %v", err)
	}
}
