// Package server is a Terrace parameter server: it stores the key slots the
// range map gives it, applies pushes with each table's update rule, and
// answers pulls within each table's consistency bound.
package server
