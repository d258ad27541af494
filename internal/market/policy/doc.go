// Package policy holds the ways of buying machines for a job that the
// replay compares: on-demand only, spot with checkpoint-restart, tiers
// with a fixed bid, and BidBrain.
package policy
