package dash

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/tier"
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

// TestScriptReadsWhatTheAPISends: every field of the status (s.*), its
// nodes (n.*) and the history's samples (h.*) that the script reads is
// in the coordinator's JSON, and every element the script writes to is
// on the page; a renamed field or id would otherwise leave a card blank
// without an error.
func TestScriptReadsWhatTheAPISends(t *testing.T) {
	js, err := static.ReadFile("static/dash.js")
	if err != nil {
		t.Fatal(err)
	}
	page, err := static.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	dollars := 0.5
	st := api.Status{Time: time.Now(), Epoch: 9, Epochs: 2, Stage: 2, StageReason: "planner", Switching: "2 -> 1", Dollars: &dollars, DollarsPerHour: &dollars,
		Nodes: []api.NodeStatus{{Role: api.RoleServer, ID: "s", Rank: 1, Addr: "a", State: "serving", Machine: "m", Class: tier.Transient,
			Tier: "activeps", Clock: 3, Holds: "h", Metrics: "x"}},
		Definition: &api.JobStatus{Results: []api.PassResult{{Pass: 1, Metrics: map[string]float64{"test_auc": 0.9}}}}}
	sample := api.Sample{Time: time.Now(), Dollars: &dollars}
	for v, obj := range map[string]any{"s": st, "n": st.Nodes[0], "h": sample} {
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		refs := regexp.MustCompile(`\b`+v+`\.([a-z_]+)(?:\.([a-z_]+))?`).FindAllStringSubmatch(string(js), -1)
		if len(refs) == 0 {
			t.Errorf("the script reads nothing of %s", v)
		}
		for _, r := range refs {
			f, ok := doc[r[1]]
			if !ok {
				t.Errorf("the script reads %s, which the JSON does not have", r[0])
				continue
			}
			if r[2] == "" {
				continue
			}
			if sub, ok := f.(map[string]any); !ok || sub[r[2]] == nil {
				t.Errorf("the script reads %s, which the JSON does not have", r[0])
			}
		}
	}
	for _, m := range regexp.MustCompile(`(?:text|getElementById)\("([a-z]+)"`).FindAllStringSubmatch(string(js), -1) {
		if !strings.Contains(string(page), `id="`+m[1]+`"`) {
			t.Errorf("the script writes to #%s, which the page does not have", m[1])
		}
	}
}
