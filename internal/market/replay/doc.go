// Package replay runs a training job under each policy over a segment of
// a market trace, from one or many start times, and reports what it cost.
package replay
