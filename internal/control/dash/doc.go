// Package dash is the coordinator's live dashboard: one page, embedded in
// the binary, whose script polls the coordinator's status and follows its
// event timeline and draws with SVG, so that it needs nothing from the
// internet and changes nothing (docs/design/observe.md).
package dash
