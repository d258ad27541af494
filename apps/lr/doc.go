// Package lr trains sparse binary logistic regression on LIBSVM data
// through the parameter server, by minibatch gradients pushed to a table
// whose server-side rule (FTRL-Proximal or AdaGrad) applies them.
package lr
