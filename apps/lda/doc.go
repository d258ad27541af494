// Package lda trains latent Dirichlet allocation by collapsed Gibbs
// sampling through the parameter server: the word-topic counts live in a
// sum-rule table that workers pull and push count deltas to, and the topic
// of every token lives with its data partition as per-partition worker
// state (ps.KeepState), so that it moves with the partition's lease when a
// worker drains or dies. See docs/design/lda.md.
package lda
