// Package billing holds the market models: when a transient machine is
// evicted, with how much notice, and what any machine costs over its life.
package billing
