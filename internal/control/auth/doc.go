// Package auth decides who may call the coordinator: join tokens, each
// granting one role (worker, server, admin or read), and an http.Handler
// middleware that refuses a request whose token does not grant what its
// route needs, with a typed error and a line in the log.
package auth
