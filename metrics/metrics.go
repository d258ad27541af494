package metrics

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Label is the element type of a label slice: package data stores labels
// as float32, other callers hold float64.
type Label interface{ ~float32 | ~float64 }

// A label counts as positive when it exceeds one half, so 0/1 and -1/+1
// labels both work.
func positive[L Label](l L) bool { return l > 0.5 }

// clip bounds the probabilities LogLoss sees, so that one confident mistake
// costs about 34.5 rather than infinity.
const clip = 1e-15

func checkLen(fn string, a, b int) {
	if a != b {
		panic(fmt.Sprintf("metrics.%s: slices of lengths %d and %d", fn, a, b))
	}
}

// Accuracy returns the fraction of examples whose predicted class, positive
// when the probability exceeds 0.5, matches the label. It returns NaN for
// no examples and panics if the lengths differ.
func Accuracy[L Label](labels []L, probs []float64) float64 {
	checkLen("Accuracy", len(labels), len(probs))
	right := 0
	for i, l := range labels {
		if positive(l) == (probs[i] > 0.5) {
			right++
		}
	}
	return float64(right) / float64(len(labels))
}

// LogLoss returns the mean negative log-likelihood of the labels under the
// predicted probabilities of the positive class, clipped to
// [1e-15, 1-1e-15].
// It returns NaN for no examples and panics if the lengths differ.
func LogLoss[L Label](labels []L, probs []float64) float64 {
	checkLen("LogLoss", len(labels), len(probs))
	var sum float64
	for i, l := range labels {
		p := min(max(probs[i], clip), 1-clip)
		if positive(l) {
			sum -= math.Log(p)
		} else {
			sum -= math.Log1p(-p)
		}
	}
	return sum / float64(len(labels))
}

// AUC returns the area under the ROC curve: the probability that a random
// positive example scores above a random negative one, ties counting one
// half (the Mann–Whitney U statistic over positives times negatives). It
// is exact, in O(n log n). When only one class is present (or none) the
// area is undefined and AUC returns 0.5, the value of an uninformative
// scorer, rather than NaN, so that a tiny evaluation shard cannot poison
// an average. NaN scores rank below all others. It panics if the lengths
// differ.
func AUC[L Label](labels []L, scores []float64) float64 {
	checkLen("AUC", len(labels), len(scores))
	type example struct {
		score float64
		pos   bool
	}
	ex := make([]example, len(labels))
	for i, l := range labels {
		ex[i] = example{scores[i], positive(l)}
	}
	slices.SortFunc(ex, func(a, b example) int { return cmp.Compare(a.score, b.score) })

	// Walk groups of tied scores upwards. Each positive beats every
	// negative below its group and ties with those inside it; counting in
	// halves keeps the sum an exact integer.
	var halves, negBelow, pos, neg uint64
	for i := 0; i < len(ex); {
		var p, n uint64
		j := i
		for ; j < len(ex) && cmp.Compare(ex[j].score, ex[i].score) == 0; j++ {
			if ex[j].pos {
				p++
			} else {
				n++
			}
		}
		halves += p * (2*negBelow + n)
		negBelow += n
		pos, neg = pos+p, neg+n
		i = j
	}
	if pos == 0 || neg == 0 {
		return 0.5
	}
	return float64(halves) / (2 * float64(pos) * float64(neg))
}

// RMSE returns the root mean squared error of pred against truth. It
// returns NaN for no values and panics if the lengths differ.
func RMSE(pred, truth []float64) float64 {
	checkLen("RMSE", len(pred), len(truth))
	var sum float64
	for i, p := range pred {
		d := p - truth[i]
		sum += d * d
	}
	return math.Sqrt(sum / float64(len(pred)))
}
