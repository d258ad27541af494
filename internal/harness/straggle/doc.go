// Package straggle makes workers straggle on purpose, reproducibly from a
// seed, for tests, benchmarks and the drill: one persistently slow worker,
// a random slow worker each clock, a disrupted machine for a period, and
// power-law delays per minibatch (docs/design/stragglers.md). A Pattern
// is parsed from `terrace train --straggle`; its Pacer plugs into a
// worker through the public ps.Client.Pace hook.
package straggle
