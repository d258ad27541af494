package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/internal/control/coord"
)

// TestDashViewAfterStepDown: the dashboard view of a replica whose term
// ended says it does not lead; it served the old term's API, which
// refused every read with "state not persisted: meta: put snapshot:
// context canceled".
func TestDashViewAfterStepDown(t *testing.T) {
	var d dashView
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/status", nil))
		return rec.Code, rec.Body.String()
	}
	d.lead(coord.New(coord.Options{Servers: 1, Workers: 1}))
	if code, body := get(); code != http.StatusOK {
		t.Fatalf("leading: %d %s", code, body)
	}
	d.lead(nil)
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "does not lead") {
		t.Fatalf("after the term: %d %s, want 503 saying it does not lead", code, body)
	}
}
