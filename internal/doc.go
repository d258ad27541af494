// Package internal holds everything that is not API: the data plane, the
// placement, storage, the server, the control plane, the processes and the
// harnesses. Its test checks that imports point down the layer table of
// docs/ARCHITECTURE.md.
package internal
