package lasso

import (
	"math"
	"slices"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/table"
)

// Config configures a run.
type Config struct {
	Train, Test string
	// Passes are sweeps over the coordinates; Batch the coordinates of
	// one step.
	Passes, Batch int
	// Lambda is the L1 strength; 0 takes LambdaRatio of the data's
	// lambda_max (the smallest that keeps every weight at zero).
	Lambda, LambdaRatio float64
	// Revisit: a coordinate that sat at zero for its last two updates is
	// skipped except in every Revisit-th pass (1: never skipped).
	Revisit     int
	Consistency table.Consistency
	Seed        uint64
	// Model, when set, is where the worker that evaluates the last pass
	// writes the model (a liblinear regression model file, model.go).
	Model string
	// Progress, when set, is called by the worker that evaluates a pass.
	Progress func(PassStats)
}

// DefaultConfig is the configuration `terrace train --app lasso` starts
// from.
func DefaultConfig() Config {
	return Config{Passes: 20, Batch: 8, LambdaRatio: 0.05, Revisit: 4, Consistency: table.Consistency{Model: table.SSP, Staleness: 1}, Seed: 1}
}

// PassStats is the evaluating worker's view after one pass.
type PassStats struct {
	Pass      int     `json:"pass"`
	Seconds   float64 `json:"seconds"`
	Objective float64 `json:"objective"`
	NonZero   int     `json:"nonzero"`
	TestRMSE  float64 `json:"test_rmse,omitempty"`
}

// Report is one worker's result; the figures are the last pass's.
type Report struct {
	App       string      `json:"app"`
	Rank      int         `json:"rank"`
	Lambda    float64     `json:"lambda"`
	Updates   int64       `json:"coordinate_updates"`
	Skipped   int64       `json:"coordinates_skipped"`
	Seconds   float64     `json:"seconds"`
	Objective float64     `json:"objective"`
	NonZero   int         `json:"nonzero"`
	TestRMSE  float64     `json:"test_rmse,omitempty"`
	Passes    []PassStats `json:"passes,omitempty"`
}

// The tables: the weights by feature, and the predictions Xw by row,
// both summed from the workers' deltas.
const (
	WeightsTable     = "lasso.w"
	PredictionsTable = "lasso.xw"
)

// Problem is the data of a fit: the training rows by column, the
// centred targets, and each column's (1/n) sum of squares. Its
// coordinates are the features the training data has, numbered densely
// (data.NumberKeys): coordinate j is feature keys[j], its key in the
// weights table. A set of indices up to 50 million took 5.6 GB and more
// than 11 minutes a pass as coordinates up to the largest index.
type Problem struct {
	n, d   int
	keys   []uint64  // by coordinate: its feature index, increasing
	y      []float64 // centred
	mean   float64
	colPtr []int
	rowIdx []int32
	vals   []float32
	sq     []float64
}

// NewProblem builds the columns of train (its labels the targets).
func NewProblem(train *data.Sparse) *Problem {
	keys, local := data.NumberKeys(train)
	n, d := train.Len(), len(keys)
	p := &Problem{n: n, d: d, keys: keys, y: make([]float64, n), colPtr: make([]int, d+1), sq: make([]float64, d)}
	for i, v := range train.Labels {
		p.mean += float64(v)
		p.y[i] = float64(v)
	}
	p.mean /= float64(max(n, 1))
	for i := range p.y {
		p.y[i] -= p.mean
	}
	for _, j := range local {
		p.colPtr[j+1]++
	}
	for j := range d {
		p.colPtr[j+1] += p.colPtr[j]
	}
	p.rowIdx, p.vals = make([]int32, len(train.Keys)), make([]float32, len(train.Keys))
	next := slices.Clone(p.colPtr[:d])
	for i := range n {
		for t := train.RowPtr[i]; t < train.RowPtr[i+1]; t++ {
			j, v := local[t], train.Vals[t]
			at := next[j]
			p.rowIdx[at], p.vals[at] = int32(i), v
			next[j]++
			p.sq[j] += float64(v) * float64(v)
		}
	}
	for j := range p.sq {
		p.sq[j] /= float64(max(n, 1))
	}
	return p
}

// Mean is the targets' mean: the model's intercept.
func (p *Problem) Mean() float64 { return p.mean }

// Keys are the coordinates' feature indices (the weights table's keys),
// in increasing order.
func (p *Problem) Keys() []uint64 { return p.keys }

// weight returns the weight of feature f given the coordinates' weights
// w: 0 for a feature the training data does not have.
func (p *Problem) weight(w []float64, f uint64) float64 {
	if j, ok := slices.BinarySearch(p.keys, f); ok {
		return w[j]
	}
	return 0
}

// LambdaMax is the smallest L1 strength at which every weight is zero:
// max over features of |(1/n) X_j . y|.
func (p *Problem) LambdaMax() float64 {
	var hi float64
	for j := range p.d {
		var s float64
		for t := p.colPtr[j]; t < p.colPtr[j+1]; t++ {
			s += float64(p.vals[t]) * p.y[p.rowIdx[t]]
		}
		hi = max(hi, math.Abs(s/float64(p.n)))
	}
	return hi
}

// Objective is (1/2n)||y - Xw||^2 + lambda ||w||_1, and the nonzero
// weights.
func (p *Problem) Objective(w []float64, lambda float64) (float64, int) {
	xw := make([]float64, p.n)
	var l1 float64
	nz := 0
	for j := range p.d {
		if w[j] == 0 {
			continue
		}
		nz++
		l1 += math.Abs(w[j])
		for t := p.colPtr[j]; t < p.colPtr[j+1]; t++ {
			xw[p.rowIdx[t]] += float64(p.vals[t]) * w[j]
		}
	}
	var sq float64
	for i, v := range xw {
		r := p.y[i] - v
		sq += r * r
	}
	return sq/(2*float64(p.n)) + lambda*l1, nz
}

// update is one coordinate's step: its new weight given the current
// weight and predictions (which it reads at the column's rows through
// xw).
func (p *Problem) update(j int, w, lambda float64, xw func(row int32) float64) float64 {
	if p.sq[j] == 0 {
		return 0
	}
	var rho float64
	for t := p.colPtr[j]; t < p.colPtr[j+1]; t++ {
		rho += float64(p.vals[t]) * (p.y[p.rowIdx[t]] - xw(p.rowIdx[t]))
	}
	rho = rho/float64(p.n) + p.sq[j]*w
	return soft(rho, lambda) / p.sq[j]
}

func soft(x, t float64) float64 {
	switch {
	case x > t:
		return x - t
	case x < -t:
		return x + t
	}
	return 0
}

// Serial fits the problem by plain cyclic coordinate descent in this
// process: the reference the distributed fit is checked against.
func (p *Problem) Serial(lambda float64, passes int) []float64 {
	w, xw := make([]float64, p.d), make([]float64, p.n)
	for range passes {
		for j := range p.d {
			nw := p.update(j, w[j], lambda, func(r int32) float64 { return xw[r] })
			if d := nw - w[j]; d != 0 {
				for t := p.colPtr[j]; t < p.colPtr[j+1]; t++ {
					xw[p.rowIdx[t]] += float64(p.vals[t]) * d
				}
				w[j] = nw
			}
		}
	}
	return w
}
