// Package optim applies pushed values to stored values under a table's update rule.
package optim
