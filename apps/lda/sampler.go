package lda

import (
	"math"
	"math/rand/v2"

	"github.com/terrace-ml/terrace/data"
)

// docRNG is the random stream of document doc in pass pass (pass 0 draws
// the initial topics). It depends on nothing else, so the first
// assignments are the same whatever the cluster's shape, and a successor
// that repeats a document after a failure draws what its predecessor drew
// (from the counts it pulls, which may differ).
func docRNG(seed uint64, pass, doc int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(pass)<<32^uint64(doc)))
}

// initTopics draws the initial topic of each token of document doc
// uniformly.
func initTopics(z []uint16, k int, seed uint64, doc int) {
	rng := docRNG(seed, 0, doc)
	for i := range z {
		z[i] = uint16(rng.IntN(k))
	}
}

// sampler is the collapsed Gibbs step for one document, shared by the
// workers and the sequential baseline.
type sampler struct {
	k           int
	alpha, beta float64
	vbeta       float64 // V·β, the denominator's smoothing
	ndk         []int32 // the document's topic counts
	cum         []float64
}

func newSampler(k, v int, alpha, beta float64) *sampler {
	return &sampler{k: k, alpha: alpha, beta: beta, vbeta: float64(v) * beta, ndk: make([]int32, k), cum: make([]float64, k)}
}

// resample draws a new topic for each token of one document (words, with
// topics z) from its conditional given every other assignment,
//
//	p(z_i = t) ∝ (n_dt + α)(n_wt + β)/(n_t + Vβ),
//
// with the token's own assignment taken out of the counts first, and puts
// it back in under its new topic. wk holds word w's row of topic counts at
// pos[w]*k, and nk the topic totals; both are updated in place. The
// document's counts n_dt are rebuilt from z, so they need no state of
// their own. Counts pulled from the servers may be stale and, read
// together with others' moves, briefly negative: they count as 0.
func (s *sampler) resample(words []uint32, z []uint16, pos []int32, wk, nk []float32, rng *rand.Rand) {
	k := s.k
	ndk := s.ndk
	clear(ndk)
	for _, t := range z {
		ndk[t]++
	}
	for i, w := range words {
		row := wk[int(pos[w])*k:][:k]
		old := z[i]
		ndk[old]--
		row[old]--
		nk[old]--
		sum := 0.0
		for t := range k {
			sum += (float64(ndk[t]) + s.alpha) * (max(float64(row[t]), 0) + s.beta) / (max(float64(nk[t]), 0) + s.vbeta)
			s.cum[t] = sum
		}
		u := rng.Float64() * sum
		t := 0
		for t < k-1 && s.cum[t] <= u {
			t++
		}
		z[i] = uint16(t)
		ndk[t]++
		row[t]++
		nk[t]++
	}
}

// logLikelihood returns log p(w | z), the probability of the tokens given
// their topics with the topics' word distributions integrated out
// (Griffiths and Steyvers 2004, eq. 2), from the word-topic counts wk (v
// rows of k):
//
//	Σ_t [lnΓ(Vβ) − lnΓ(n_t + Vβ) + Σ_w (lnΓ(n_wt + β) − lnΓ(β))].
//
// It needs nothing but the table, so rank 0 computes it alone after each
// pass's barrier, whoever trained what.
func logLikelihood(wk []float32, v, k int, beta float64) float64 {
	nk := make([]float64, k)
	lgBeta, _ := math.Lgamma(beta)
	var ll float64
	for i, n := range wk[:v*k] {
		if n <= 0 {
			continue
		}
		nk[i%k] += float64(n)
		lg, _ := math.Lgamma(float64(n) + beta)
		ll += lg - lgBeta
	}
	lgVBeta, _ := math.Lgamma(float64(v) * beta)
	for _, n := range nk {
		lg, _ := math.Lgamma(n + float64(v)*beta)
		ll += lgVBeta - lg
	}
	return ll
}

// foldInSweeps is how many Gibbs sweeps estimate a held-out document's
// topic mixture; the second half of them are averaged.
const foldInSweeps = 20

// perplexity estimates held-out perplexity by document completion
// (Wallach et al. 2009): each test document's even-numbered tokens fix its
// topic mixture θ_d (foldIn), and its odd-numbered tokens are scored,
// exp(−Σ log Σ_t θ_dt φ_tw / N). φ_t is held at its posterior mean
// (n_wt + β)/(n_t + Vβ). Deterministic in seed.
func perplexity(test *data.Corpus, wk []float32, v, k int, alpha, beta float64, seed uint64) float64 {
	phi := topicWords(wk, v, k, beta)
	f := &foldIn{k: k, alpha: alpha, phi: phi, theta: make([]float64, k), ndk: make([]int, k), cum: make([]float64, k)}
	var logp float64
	n := 0
	for d := range test.NumDocs() {
		words := test.Doc(d)
		f.estimate(words, docRNG(seed, 0, -1-d)) // a stream no training document uses
		for i := 1; i < len(words); i += 2 {
			var p float64
			row := phi[int(words[i])*k:][:k]
			for t, th := range f.theta {
				p += th * row[t]
			}
			logp += math.Log(p)
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return math.Exp(-logp / float64(n))
}

// foldIn estimates a held-out document's topic mixture with the topics φ
// fixed: Gibbs sampling over the document's even-numbered tokens,
// p(z_i = t) ∝ (n_dt + α) φ_tw, averaging θ over the second half of
// foldInSweeps sweeps.
type foldIn struct {
	k     int
	alpha float64
	phi   []float64
	theta []float64
	ndk   []int
	cum   []float64
	z     []int
}

func (f *foldIn) estimate(words []uint32, rng *rand.Rand) {
	k := f.k
	seen := (len(words) + 1) / 2
	f.z = f.z[:0]
	clear(f.ndk)
	for range seen {
		t := rng.IntN(k)
		f.z = append(f.z, t)
		f.ndk[t]++
	}
	clear(f.theta)
	norm := float64(foldInSweeps-foldInSweeps/2) * (float64(seen) + float64(k)*f.alpha)
	for sweep := range foldInSweeps {
		for i, old := range f.z {
			row := f.phi[int(words[2*i])*k:][:k]
			f.ndk[old]--
			sum := 0.0
			for t := range k {
				sum += (float64(f.ndk[t]) + f.alpha) * row[t]
				f.cum[t] = sum
			}
			u := rng.Float64() * sum
			t := 0
			for t < k-1 && f.cum[t] <= u {
				t++
			}
			f.z[i] = t
			f.ndk[t]++
		}
		if sweep >= foldInSweeps/2 {
			for t := range k {
				f.theta[t] += (float64(f.ndk[t]) + f.alpha) / norm
			}
		}
	}
}

// topicWords returns φ, word w's probability under topic t at w*k+t.
func topicWords(wk []float32, v, k int, beta float64) []float64 {
	nk := make([]float64, k)
	for i, n := range wk[:v*k] {
		nk[i%k] += max(float64(n), 0)
	}
	phi := make([]float64, v*k)
	for i, n := range wk[:v*k] {
		phi[i] = (max(float64(n), 0) + beta) / (nk[i%k] + float64(v)*beta)
	}
	return phi
}
