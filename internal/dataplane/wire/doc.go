// Package wire encodes and decodes Terrace's data-plane frames: a 32-byte
// header with magic, version, type, epoch, request id, payload length and a
// CRC32C, followed by a little-endian payload (docs/format/wire.md).
package wire
