// Package coord is the coordinator: it admits servers and workers, gives
// workers their ranks, keeps the tables and the range map, and publishes
// them as a versioned layout that nodes long-poll over HTTP.
package coord
