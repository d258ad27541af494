package dash

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestServesEverythingItself: the page and its files are served from the
// binary, and nothing on the page comes from elsewhere (it works offline).
func TestServesEverythingItself(t *testing.T) {
	h := Handler()
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(b)
	}
	code, page := get("/")
	if code != http.StatusOK || !strings.Contains(page, "<title>Terrace</title>") {
		t.Fatalf("/: %d %.80q", code, page)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(refs) == 0 {
		t.Fatal("the page loads no script or style")
	}
	for _, r := range refs {
		if !strings.HasPrefix(r[1], "/dash/") {
			t.Errorf("the page loads %s, not one of its own files", r[1])
			continue
		}
		if code, _ := get(r[1]); code != http.StatusOK {
			t.Errorf("%s: %d", r[1], code)
		}
	}
	// The script reads only the coordinator it came from.
	_, js := get("/dash/dash.js")
	fetches := regexp.MustCompile(`fetch\("([^"]*)"`).FindAllStringSubmatch(js, -1)
	if len(fetches) == 0 {
		t.Fatal("the script fetches nothing")
	}
	for _, f := range fetches {
		if !strings.HasPrefix(f[1], "/v1/") {
			t.Errorf("the script fetches %s", f[1])
		}
	}
	if strings.Contains(js, "https://") || strings.Contains(page, "https://") {
		t.Error("the page refers to another site")
	}
	if code, _ := get("/dash/nothing.js"); code != http.StatusNotFound {
		t.Errorf("a missing file: %d", code)
	}
}
