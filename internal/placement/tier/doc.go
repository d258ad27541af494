// Package tier names the tiers of reliability: the class of a machine
// (reliable or transient), the stage a cluster runs in, and per-class
// figures such as link bandwidths and prices, with the parsing of their
// command-line lists (docs/design/tiers.md).
package tier
