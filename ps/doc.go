// Package ps is the worker's API to the parameter server: asynchronous
// Push, Pull and PushPull on sorted key lists and key ranges of named
// tables, each returning a Future, and Clock for the consistency models.
//
// Values are sent straight from the caller's slices and received straight
// into them: a slice passed to Push or Pull must not be touched until its
// Future is done.
package ps
