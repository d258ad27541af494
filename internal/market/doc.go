// Package market names what the market side of Terrace talks about: machine
// classes, markets, requests for machines, the machines themselves and the
// events a provider reports about them.
package market
