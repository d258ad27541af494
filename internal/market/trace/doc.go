// Package trace reads spot price histories and preemption traces from the
// forms they are published in, and fails on a bad row naming its file and
// line.
package trace
