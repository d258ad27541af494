// Package lasso fits L1-regularised least squares by coordinate descent
// through the parameter server, with model scheduling in Litz's and
// STRADS's sense: the partitions a pass leases out are blocks of
// coordinates (features) instead of rows, so workers update disjoint
// coordinates in parallel, and a worker skips coordinates that have sat
// at zero, revisiting them every few passes.
package lasso
