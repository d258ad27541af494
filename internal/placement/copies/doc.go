// Package copies is the coordinator's account of which servers hold a
// complete copy of which slots, from the layouts it publishes and the
// rebuilds its servers report finished, so that a slot whose every copy is
// gone is reported rather than served empty (docs/design/resilience.md,
// "Slots that lost every copy").
package copies
