// Package localprov is a market.Provider whose machines are real
// processes on this host: a trace provider decides prices, admissions,
// notices and bills in compressed time, and each of its machine events
// is carried out on a set of processes (docs/design/market.md, "The
// local provider").
package localprov
