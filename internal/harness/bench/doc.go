// Package bench measures Terrace's data plane and an application against baselines timed in the same run, so that the ratios stay meaningful on a shared, noisy machine.
package bench
