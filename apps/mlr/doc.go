// Package mlr trains multinomial (softmax) logistic regression, and with
// a hidden layer of ReLU units a small neural network (`--app nn`), by
// minibatch SGD through the parameter server: one table row a feature,
// one column a class (key 0 the biases), whose server-side rule applies
// the averaged gradients. It reads LIBSVM multi-class lines and MNIST's
// IDX files (data.ReadClasses).
package mlr
