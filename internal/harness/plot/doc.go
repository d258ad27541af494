// Package plot draws a run's report on one time axis: the test metric and
// the training loss by pass, the coordinator's events (joins, failures,
// drains, range moves, checkpoints) and the drill's faults and longest
// stall, as SVG or PNG through gonum/plot.
package plot
