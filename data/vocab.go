package data

import (
	"io"
)

// ReadVocab reads a vocabulary file, plain or gzip-compressed. See
// ParseVocab.
func ReadVocab(path string) ([]string, error) {
	return readFile(path, ParseVocab)
}

// ParseVocab reads one word per line, such as a UCI Bag of Words
// vocabulary (KOS's dictionary.txt): the word on 0-based line i is word id
// i of the matching doc-word-count file. Spaces, tabs and CRs around a word
// are dropped. Because a word's id is its line number, a blank line, which
// would shift every id after it, is an error, and so is a word with white
// space inside.
//
// A malformed line gives a *LineError wrapping ErrMalformed.
func ParseVocab(r io.Reader, name string) ([]string, error) {
	var words []string
	err := eachLine(r, name, func(line []byte) string {
		tok, rest := field(line)
		if len(tok) == 0 {
			return "blank line (each line is one word, its id the 0-based line number)"
		}
		if more, _ := field(rest); len(more) > 0 {
			return "word " + quote(line) + " has white space inside"
		}
		words = append(words, string(tok))
		return ""
	})
	if err != nil {
		return nil, err
	}
	return words, nil
}
