// Package planner recommends the stage a tiered cluster should run in: for
// each stage it builds a flow network whose capacities come from
// measurements of the running job, solves it with a max-flow, names the
// bottleneck as the edges of a minimum cut, and picks the stage with the
// most updates per dollar, with hysteresis so that re-planning at every
// membership change never flaps (docs/design/tiers.md, "The planner").
//
// It is pure: no I/O, no clock; time comes in with each call.
package planner
