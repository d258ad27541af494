// Package realreplay runs a training job for real under a trace segment:
// a policy's machines are acquired from a local provider, each one a
// server and workers started as processes, in compressed time, and the
// run reports what the simulated replay reports plus the job's final test
// metric (docs/design/market.md, "The real replay").
package realreplay
