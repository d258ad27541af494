package data

import (
	"bytes"
	"compress/gzip"
	"io"
	"slices"
	"testing"
)

// TestByteOrderMark: text saved by Windows tools starts with a UTF-8 byte
// order mark, plain or inside gzip; every text reader skips it, and the
// first line reads as it would without it.
func TestByteOrderMark(t *testing.T) {
	const bom = "\xef\xbb\xbf"
	formats := []struct {
		name, text string
		check      func(r io.Reader) (string, bool)
	}{
		{"libsvm", "+1 3:1 7:0.5\r\n-1 2:1\r\n", func(r io.Reader) (string, bool) {
			s, err := ParseLIBSVM(r, "x")
			return errString(err), err == nil && s.Len() == 2 && s.Labels[0] == 1 && s.Keys[0] == 3
		}},
		{"ratings csv with a header", "userId,movieId,rating,timestamp\r\n1,31,2.5,1260759144\r\n", func(r io.Reader) (string, bool) {
			rs, err := ParseRatings(r, "x")
			return errString(err), err == nil && rs.Len() == 1 && rs.Users[0] == 1 && rs.Items[0] == 31
		}},
		{"uci docword", "2\n3\n2\n1 1 2\n2 3 1\n", func(r io.Reader) (string, bool) {
			c, err := ParseDocWords(r, "x")
			return errString(err), err == nil && c.NumDocs() == 2 && c.NumWords == 3
		}},
		{"vocab", "aardvark\nzebra\n", func(r io.Reader) (string, bool) {
			v, err := ParseVocab(r, "x")
			return errString(err), err == nil && slices.Equal(v, []string{"aardvark", "zebra"})
		}},
	}
	for _, f := range formats {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write([]byte(bom + f.text))
		zw.Close()
		for _, in := range []struct{ how, data string }{{"plain", bom + f.text}, {"gzip", gz.String()}} {
			if err, ok := f.check(bytes.NewReader([]byte(in.data))); !ok {
				t.Errorf("%s, %s, after a byte order mark: not read as without it (err %s)", f.name, in.how, err)
			}
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
