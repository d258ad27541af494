package auth

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// FuzzGuardJoin sends arbitrary join bodies with a worker's token: the
// guard must never let through a join that does not ask, in JSON the
// handler reads the same way, for the worker role, and must answer every
// refusal with a JSON error reply.
func FuzzGuardJoin(f *testing.F) {
	f.Add([]byte(`{"role":"worker","id":"w"}`))
	f.Add([]byte(`{"role":"server","id":"s","addr":"x:1"}`))
	f.Add([]byte(`{"role":"worker","role":"server"}`))
	f.Add([]byte(`{"Role":"server"}`))
	f.Add([]byte(`{"role":"worker"}{"role":"server"}`))
	f.Add([]byte("\xef\xbb\xbf{}"))
	h := guarded(f, io.Discard)
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/v1/join", strings.NewReader(string(body)))
		r.Header.Set("Authorization", "Bearer "+workerTok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			var rep api.ErrorReply
			if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil || rep.Code.Status() != w.Code {
				t.Fatalf("refusal %d with body %q", w.Code, w.Body)
			}
			return
		}
		// The coordinator decodes the first JSON value of the body.
		var j api.Join
		if err := json.NewDecoder(strings.NewReader(w.Body.String())).Decode(&j); err == nil && j.Role != api.RoleWorker {
			t.Fatalf("a worker's token joined as %q with body %q", j.Role, body)
		}
	})
}
