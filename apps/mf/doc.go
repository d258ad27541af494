// Package mf trains biased matrix factorisation of a ratings matrix by
// minibatch SGD through the parameter server: user and item factors and
// biases live in two tables whose server-side rule applies the gradients.
package mf
