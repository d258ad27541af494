package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestJoinAsAnnouncesMetrics: a node that joins with its machine and
// class announces where it serves /metrics, as JoinServer and JoinWorker
// do (it did not, and the dashboard and terrace status listed no metrics
// address for any process started by terrace server or worker).
func TestJoinAsAnnouncesMetrics(t *testing.T) {
	got := make(chan Join, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var j Join
		json.NewDecoder(r.Body).Decode(&j)
		got <- j
		json.NewEncoder(w).Encode(Joined{Rank: 0})
	}))
	defer hs.Close()
	cl := NewClient(hs.URL, nil)
	cl.Metrics = "127.0.0.1:9100"
	if _, err := cl.JoinAs(t.Context(), Join{Role: RoleWorker, ID: "w0", Machine: "m0"}); err != nil {
		t.Fatal(err)
	}
	if j := <-got; j.Metrics != "127.0.0.1:9100" || j.Machine != "m0" {
		t.Fatalf("joined as %+v", j)
	}
}
