// Package node runs Terrace's processes: a coordinator, a server that
// joins and follows the layout, and a worker that joins, connects and runs
// a job; Local runs a whole cluster of them on loopback.
package node
