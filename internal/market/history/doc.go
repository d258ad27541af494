// Package history is what a policy may know of the markets: their past up
// to now and nothing after it, and the eviction risks estimated from it.
package history
