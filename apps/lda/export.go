package lda

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Export writes the model to dir as TSV: topic_word_counts.tsv holds, for
// every word, "word_id word n_1 ... n_K" (its token count in each topic;
// word is the vocabulary's, or #id), and top_words.tsv "topic tokens
// w_1 ... w_10", largest topics first. wk is the table (TableName), as
// pulled or read from a checkpoint: word w's count in topic t at
// wk[w*k+t], for the v words of the corpus.
func Export(dir string, wk []float32, v, k int, vocab []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lda: export: %w", err)
	}
	name := func(w int) string {
		if w < len(vocab) {
			return vocab[w]
		}
		return "#" + strconv.Itoa(w)
	}
	var b strings.Builder
	for w := range v {
		b.WriteString(strconv.Itoa(w) + "\t" + name(w))
		for t := range k {
			b.WriteString("\t" + strconv.FormatFloat(float64(wk[w*k+t]), 'f', -1, 32))
		}
		b.WriteByte('\n')
	}
	if err := writeFile(filepath.Join(dir, "topic_word_counts.tsv"), b.String()); err != nil {
		return err
	}
	b.Reset()
	for i, t := range topics(wk, v, k, vocab) {
		fmt.Fprintf(&b, "%d\t%d\t%s\n", i+1, t.Tokens, strings.Join(t.Words, "\t"))
	}
	return writeFile(filepath.Join(dir, "top_words.tsv"), b.String())
}

func writeFile(path, s string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("lda: export: %w", err)
	}
	w := bufio.NewWriter(f)
	w.WriteString(s)
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("lda: export: %w", err)
	}
	return f.Close()
}
