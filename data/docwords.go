package data

import (
	"fmt"
	"io"
	"math"
)

// Corpus is a bag-of-words text corpus with every occurrence of a word
// expanded into a token, as topic models sample them: document d's tokens
// are Words[DocPtr[d]:DocPtr[d+1]], in file order.
type Corpus struct {
	// IDs are the documents' ids as given in the file, in increasing order;
	// documents are numbered 0..NumDocs()-1 by position here, so an id
	// that never appears takes no room.
	IDs    []uint32
	DocPtr []int // len NumDocs()+1, DocPtr[0] == 0
	Words  []uint32
	// NumWords is the largest word id plus one (0 if there are no tokens).
	NumWords int
}

// NumDocs returns the number of documents.
func (c *Corpus) NumDocs() int { return len(c.IDs) }

// Doc returns the tokens of document d. The slice aliases c; its capacity
// is clipped so that appending to it cannot clobber the next document.
func (c *Corpus) Doc(d int) []uint32 {
	lo, hi := c.DocPtr[d], c.DocPtr[d+1]
	return c.Words[lo:hi:hi]
}

// Tokens returns the number of tokens of all documents.
func (c *Corpus) Tokens() int { return len(c.Words) }

// maxCount bounds one line's count so that a corrupt line cannot make the
// reader allocate gigabytes of tokens: KOS's largest count is 43.
const maxCount = 1 << 20

// ReadDocWords reads a doc-word-count file, plain or gzip-compressed. See
// ParseDocWords.
func ReadDocWords(path string) (*Corpus, error) {
	return readFile(path, ParseDocWords)
}

// ParseDocWords reads lines "doc word count", plain or gzip-compressed
// (detected from the magic bytes), naming errors after name, in either
// form of the UCI Bag of Words corpora (KOS, NIPS, Enron, NYTimes,
// PubMed):
//   - UCI's own docword.*.txt: three header lines D, W and NNZ (the
//     numbers of documents, of words and of the lines that follow), then
//     1-based ids, which are stored 0-based (word i is then line i of
//     UCI's vocab.*.txt, as ReadVocab numbers it); ids beyond D or W and a
//     line count other than NNZ are errors;
//   - the 0-based form without a header that GraphLab's topic modelling
//     toolkit reads (doc<TAB>word<TAB>count).
//
// Fields are separated by runs of spaces or tabs. Document and word ids
// are decimal uint32s; count is a positive integer of at most 2^20, and
// that many tokens of the word are added to the document. A document's
// lines must be contiguous and documents must come in increasing id order,
// as in the UCI files, so that one pass builds the corpus. Blank lines are
// skipped.
//
// A malformed line gives a *LineError wrapping ErrMalformed.
func ParseDocWords(r io.Reader, name string) (*Corpus, error) {
	var (
		ids, words column[uint32]
		ptr        column[int]
		maxWord    uint32
		lastDoc    uint32 // valid once ids is not empty
		header     []uint64
		uci        bool // the header was read: ids count from 1
		lines      int  // data lines read
	)
	ptr.add(0)
	err := eachLine(r, name, func(line []byte) string {
		var f [3][]byte
		n := 0
		for tok, rest := field(line); len(tok) > 0; tok, rest = field(rest) {
			if n < len(f) {
				f[n] = tok
			}
			n++
		}
		if n == 0 {
			return ""
		}
		if n == 1 && lines == 0 && len(header) < 3 {
			v, ok, _ := parseUint(f[0], math.MaxUint32)
			if !ok {
				return fmt.Sprintf("header line %s is not a count (UCI's docword files begin with D, W and NNZ, one a line)", quote(f[0]))
			}
			header = append(header, v)
			uci = len(header) == 3
			return ""
		}
		if len(header) > 0 && !uci {
			return fmt.Sprintf("%d header line(s) of UCI's 3 (D, W and NNZ), then a data line", len(header))
		}
		if n != 3 {
			return fmt.Sprintf("%d fields, want doc word count", n)
		}
		doc, word, count, reason := parseDocWord(f)
		if reason != "" {
			return reason
		}
		if uci {
			switch {
			case doc == 0 || uint64(doc) > header[0]:
				return fmt.Sprintf("document %d outside 1..%d (the header's D)", doc, header[0])
			case word == 0 || uint64(word) > header[1]:
				return fmt.Sprintf("word %d outside 1..%d (the header's W)", word, header[1])
			}
			doc, word = doc-1, word-1
		}
		lines++
		switch {
		case ids.len() > 0 && doc < lastDoc:
			return fmt.Sprintf("document %d after document %d (lines must be grouped by document, in increasing order)", doc, lastDoc)
		case ids.len() == 0 || doc > lastDoc:
			if ids.len() > 0 {
				ptr.add(words.len())
			}
			ids.add(doc)
			lastDoc = doc
		}
		for range count {
			words.add(word)
		}
		maxWord = max(maxWord, word)
		return ""
	})
	if err != nil {
		return nil, err
	}
	switch {
	case len(header) > 0 && !uci:
		return nil, &LineError{File: name, Reason: fmt.Sprintf("%d header line(s) of UCI's 3 (D, W and NNZ), and no data", len(header))}
	case uci && uint64(lines) != header[2]:
		return nil, &LineError{File: name, Reason: fmt.Sprintf("the header's NNZ says %d data lines, the file has %d (truncated?)", header[2], lines)}
	}
	c := &Corpus{}
	if ids.len() > 0 {
		ptr.add(words.len())
		c.NumWords = int(maxWord) + 1
	}
	if uci {
		c.NumWords = int(header[1])
	}
	c.IDs, c.DocPtr, c.Words = ids.slice(), ptr.slice(), words.slice()
	return c, nil
}

// parseDocWord parses the three fields of a doc-word-count line.
func parseDocWord(f [3][]byte) (doc, word uint32, count int, reason string) {
	if doc, reason = parseID("document", f[0]); reason != "" {
		return
	}
	if word, reason = parseID("word", f[1]); reason != "" {
		return
	}
	c, ok, tooBig := parseUint(f[2], math.MaxInt64)
	switch {
	case !ok && !tooBig:
		return 0, 0, 0, fmt.Sprintf("count %s is not a non-negative integer", quote(f[2]))
	case tooBig || c > maxCount:
		return 0, 0, 0, fmt.Sprintf("count %s is over %d", quote(f[2]), maxCount)
	case c == 0:
		return 0, 0, 0, "count is 0 (a line lists a word the document has)"
	}
	return doc, word, int(c), ""
}
