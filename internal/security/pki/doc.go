// Package pki makes and reads the certificates of a Terrace cluster: a
// cluster CA, node certificates it signs, and a Source that serves a
// node's certificate and trusted CAs to TLS, re-reading the files when
// they change so that certificates rotate without a restart.
package pki
