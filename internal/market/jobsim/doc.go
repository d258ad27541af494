// Package jobsim is a fast model of a training job on machines that come
// and go: its work, its throughput by machine class and tier stage, and
// what switches, joins, evictions, checkpoints and restarts cost it.
package jobsim
