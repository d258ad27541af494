package auth

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
)

// fuzzRoutes are the routes that take a JSON body or a query.
var fuzzRoutes = []string{
	api.RouteJoin, api.RouteTables, api.RouteReport, api.RouteHeartbeat, api.RouteLeave,
	api.RouteAcquire, api.RouteProgress, api.RouteSplit, api.RouteState, api.RouteServerLeave,
	api.RouteSynced, api.RouteCheckpointed, api.RouteRestored, api.RouteCheckpoint, api.RouteLayout,
}

// FuzzHandlers sends arbitrary bodies and queries to every JSON handler of
// a running coordinator, behind the guard with an admin token: each must
// answer (never panic, never hang past its context), with 200 or a JSON
// error reply whose code matches its status. It lives here rather than in
// coord, whose scenario tests read every file under its testdata. The
// corpus is in testdata/fuzz/FuzzHandlers.
func FuzzHandlers(f *testing.F) {
	f.Add(uint8(0), "", []byte(`{"role":"server","id":"s0","addr":"127.0.0.1:1"}`))
	f.Add(uint8(0), "", []byte(`{"role":"worker","id":"w0"}`))
	f.Add(uint8(1), "", []byte(`{"name":"t","width":1,"rule":{"kind":"sum"}}`))
	f.Add(uint8(2), "rank=0", []byte(`{"examples":1}`))
	f.Add(uint8(6), "", []byte(`{"rank":0,"partition":0,"offset":-1,"state":"AAAA"}`))
	f.Add(uint8(8), "partition=-1&version=18446744073709551615", []byte(nil))
	f.Add(uint8(14), "after=x", []byte(nil))
	f.Add(uint8(3), "", []byte(`{"rank":99999999999999999999}`))
	c := coord.New(coord.Options{Servers: 1, Workers: 1, Partitions: 2})
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	go c.Run(ctx)
	toks, err := ParseTokens(strings.NewReader("admin " + adminTok))
	if err != nil {
		f.Fatal(err)
	}
	h := NewGuard(toks, slog.New(slog.NewTextHandler(io.Discard, nil))).Wrap(c.Handler())
	f.Fuzz(func(t *testing.T, route uint8, query string, body []byte) {
		method, path, _ := strings.Cut(fuzzRoutes[int(route)%len(fuzzRoutes)], " ")
		r := httptest.NewRequest(method, "http://coordinator"+path, strings.NewReader(string(body)))
		r.URL.RawQuery = query
		r.Header.Set("Authorization", "Bearer "+adminTok)
		rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer rcancel()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(rctx))
		if w.Code == http.StatusOK {
			return
		}
		var rep api.ErrorReply
		if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil {
			t.Fatalf("%s %s?%s: status %d with a body that is no error reply: %q", method, path, query, w.Code, w.Body)
		}
		if rep.Code.Status() != w.Code {
			t.Fatalf("%s %s: status %d but code %s", method, path, w.Code, rep.Code)
		}
	})
}
