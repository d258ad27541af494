// Package metrics scores predictions against held-out labels: accuracy,
// log loss and AUC for binary classifiers, RMSE for regression.
package metrics
