// Package transport carries wire frames over persistent TCP connections:
// a coalescing writer that batches queued frames into one vectored write,
// and a client that matches replies to requests by request id.
package transport
