package store

import "unsafe"

// prefetch asks for the cache line of each address (prefetch_amd64.s).
//
//go:noescape
func prefetch(addrs []unsafe.Pointer)
