// Package traceprov is a provider whose machines live in recorded price
// and preemption traces, stepped event by event or run in compressed time
// on an injected clock.
package traceprov
