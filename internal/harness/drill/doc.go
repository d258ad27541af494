// Package drill runs a resilience drill: a whole cluster as separate
// processes, faults injected on a schedule, and a report of what the faults
// cost, measured by independent accounting.
package drill
