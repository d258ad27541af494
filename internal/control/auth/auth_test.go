package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

const (
	adminTok  = "admin-token-0123456789"
	serverTok = "server-token-0123456789"
	workerTok = "worker-token-0123456789"
	readTok   = "read-token-0123456789"
)

func guarded(t testing.TB, log io.Writer) http.Handler {
	t.Helper()
	toks, err := ParseTokens(strings.NewReader("# comment\nadmin " + adminTok + "\nserver " + serverTok + "\nworker " + workerTok + "\nread " + readTok + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The handler must still see the whole body the guard peeked at.
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	return NewGuard(toks, slog.New(slog.NewTextHandler(log, nil))).Wrap(next)
}

func TestGuard(t *testing.T) {
	var log bytes.Buffer
	h := guarded(t, &log)
	join := func(role string) string {
		b, _ := json.Marshal(api.Join{Role: role, ID: "n"})
		return string(b)
	}
	for _, tc := range []struct {
		name, route, token, body string
		want                     error
	}{
		{"health needs nothing", api.RouteHealth, "", "", nil},
		{"no token", api.RouteLayout, "", "", api.ErrUnauthenticated},
		{"unknown token", api.RouteLayout, "nope-nope-nope-nope", "", api.ErrUnauthenticated},
		{"worker joins as worker", api.RouteJoin, workerTok, join(api.RoleWorker), nil},
		{"worker joins as server", api.RouteJoin, workerTok, join(api.RoleServer), api.ErrForbidden},
		{"server joins as server", api.RouteJoin, serverTok, join(api.RoleServer), nil},
		{"read joins", api.RouteJoin, readTok, join(api.RoleWorker), api.ErrForbidden},
		{"join of no role", api.RouteJoin, adminTok, join("god"), api.ErrBadRequest},
		{"join not JSON", api.RouteJoin, workerTok, "{", api.ErrBadRequest},
		{"read reads the layout", api.RouteLayout, readTok, "", nil},
		{"worker reads the layout", api.RouteLayout, workerTok, "", nil},
		{"read asks for a checkpoint", api.RouteCheckpoint, readTok, "", api.ErrForbidden},
		{"worker asks for a checkpoint", api.RouteCheckpoint, workerTok, "", api.ErrForbidden},
		{"admin asks for a checkpoint", api.RouteCheckpoint, adminTok, "", nil},
		{"worker reports synced", api.RouteSynced, workerTok, "{}", api.ErrForbidden},
		{"server reports synced", api.RouteSynced, serverTok, "{}", nil},
		{"server reports rebuilt", api.RouteRebuilt, serverTok, "{}", nil},
		{"worker reports rebuilt", api.RouteRebuilt, workerTok, "{}", api.ErrForbidden},
		{"server acquires work", api.RouteAcquire, serverTok, "{}", api.ErrForbidden},
		{"unknown POST needs admin", "POST /v1/drain", serverTok, "", api.ErrForbidden},
		{"unknown POST by admin", "POST /v1/drain", adminTok, "", nil},
		{"unknown GET needs read", "GET /v1/status", readTok, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, path, _ := strings.Cut(tc.route, " ")
			r := httptest.NewRequest(method, path, strings.NewReader(tc.body))
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if tc.want == nil {
				if w.Code != http.StatusOK || w.Body.String() != tc.body {
					t.Fatalf("status %d, body %q; want 200 and the body passed through", w.Code, w.Body)
				}
				return
			}
			var rep api.ErrorReply
			if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(rep.Code.Err(), tc.want) || w.Code != rep.Code.Status() {
				t.Fatalf("status %d, reply %+v; want %v", w.Code, rep, tc.want)
			}
		})
	}
	if !strings.Contains(log.String(), "refused request") || !strings.Contains(log.String(), "a worker token may not act as server") {
		t.Errorf("refusals not logged:\n%s", log.String())
	}
}

func TestGuardRefusesOversizedBodies(t *testing.T) {
	h := guarded(t, io.Discard)
	r := httptest.NewRequest("POST", "/v1/work/progress", strings.NewReader("x"))
	r.ContentLength = MaxBody + 1
	r.Header.Set("Authorization", "Bearer "+workerTok)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", w.Code)
	}
	big := strings.Repeat(" ", maxJoinBody+10) + `{"role":"worker"}`
	r = httptest.NewRequest("POST", "/v1/join", strings.NewReader(big))
	r.Header.Set("Authorization", "Bearer "+workerTok)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest {
		t.Fatalf("oversized join: status %d, want 400", w.Code)
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/tokens"
	if err := WriteNew(path); err != nil {
		t.Fatal(err)
	}
	if err := WriteNew(path); err == nil {
		t.Fatal("WriteNew overwrote a tokens file")
	}
	toks, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range Roles {
		tok, err := ReadToken(path, role, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := toks.Role(tok); !ok || got != role {
			t.Errorf("token for %s has role %s", role, got)
		}
	}
	env := func(k string) string {
		if k == EnvToken {
			return " from-env \n"
		}
		return ""
	}
	if tok, _ := ReadToken("", RoleWorker, env); tok != "from-env" {
		t.Errorf("token from the environment: %q", tok)
	}
	// A directory given for the file was said to be open to others.
	if _, err := ReadToken(dir, RoleWorker, nil); err == nil || !strings.Contains(err.Error(), dir+" is a directory") {
		t.Errorf("ReadToken of a directory: %v", err)
	}
	if _, err := LoadTokens(dir); err == nil || !strings.Contains(err.Error(), dir+" is a directory") {
		t.Errorf("LoadTokens of a directory: %v", err)
	}
	for _, bad := range []string{"", "king abcdefghijklmnopq\n", "worker short\n", "worker a b\n"} {
		if _, err := ParseTokens(strings.NewReader(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseTokens(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

// TestReadTokenOfOneRole: a node given only its role's line, as the
// README hands them out, reads with it (status and export need read, and
// every role grants read; admin grants everything), and is told which
// line it lacks when its role does not grant what is asked.
func TestReadTokenOfOneRole(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	worker := write("worker.token", "worker wwwwwwwwwwwwwwwwwwww\n")
	admin := write("admin.token", "admin aaaaaaaaaaaaaaaaaaaa\n")
	for _, c := range []struct {
		path string
		need Role
		want string
	}{
		{worker, RoleWorker, "wwwwwwwwwwwwwwwwwwww"},
		{worker, RoleRead, "wwwwwwwwwwwwwwwwwwww"},
		{admin, RoleRead, "aaaaaaaaaaaaaaaaaaaa"},
		{admin, RoleServer, "aaaaaaaaaaaaaaaaaaaa"},
	} {
		if tok, err := ReadToken(c.path, c.need, nil); err != nil || tok != c.want {
			t.Errorf("ReadToken(%s, %s) = %q, %v; want %q", c.path, c.need, tok, err, c.want)
		}
	}
	_, err := ReadToken(worker, RoleAdmin, nil)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), worker) || !strings.Contains(err.Error(), `"admin" line`) {
		t.Errorf("a worker's file asked for admin: %v, want ErrInvalid naming the file and the line it needs", err)
	}
}

// TestTokenFileOpenToOthers: a token file, or the coordinator's tokens
// file, that others may read is refused, naming the file and the fix.
func TestTokenFileOpenToOthers(t *testing.T) {
	path := t.TempDir() + "/tokens"
	if err := WriteNew(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(path); !errors.Is(err, ErrExposed) || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Errorf("LoadTokens of a 0644 file: %v, want ErrInvalid naming the fix", err)
	}
	if _, err := ReadToken(path, RoleWorker, nil); !errors.Is(err, ErrExposed) {
		t.Errorf("ReadToken of a 0644 file: %v, want ErrInvalid", err)
	}
}

// TestTokenFileReloads: a token revoked or added by editing the
// coordinator's tokens file counts from the next request, through the
// guard, with no restart (a rotation was a restart); a change that
// leaves the file invalid, open to others or gone warns once and keeps
// the tokens in force.
func TestTokenFileReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	stamp := time.Now().Add(-time.Hour) // each edit long settled (settleTokens)
	write := func(body string) {
		t.Helper()
		// In place, as an editor does: a new modification time is set
		// apart from the last one (the file system's clock may be
		// coarser than two writes a test makes).
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		stamp = stamp.Add(time.Second)
		if err := os.Chtimes(path, stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}
	const newWorker = "worker-token-abcdefghij"
	write("admin " + adminTok + "\nworker " + workerTok + "\n")
	var log bytes.Buffer
	f, err := OpenTokens(path, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h := NewGuard(f, slog.New(slog.NewTextHandler(io.Discard, nil))).Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	status := func(tok string) int {
		r := httptest.NewRequest("GET", "/v1/layout", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	check := func(when string, want map[string]int) {
		t.Helper()
		for tok, code := range want {
			if got := status(tok); got != code {
				t.Errorf("%s: token %s: status %d, want %d", when, tok, got, code)
			}
		}
	}
	check("at start", map[string]int{adminTok: 200, workerTok: 200, newWorker: 401})

	write("admin " + adminTok + "\nworker " + newWorker + "\n")
	check("worker's token replaced", map[string]int{adminTok: 200, workerTok: 401, newWorker: 200})
	if !strings.Contains(log.String(), "tokens file reloaded") {
		t.Errorf("a reload is not logged:\n%s", log.String())
	}

	for _, bad := range []struct{ name, body string }{
		{"empty", ""},
		{"malformed", "admin\n"},
		{"unknown role", "admin " + adminTok + "\nroot " + adminTok + "\n"},
	} {
		log.Reset()
		write(bad.body)
		check(bad.name, map[string]int{adminTok: 200, newWorker: 200, workerTok: 401})
		check(bad.name+", again", map[string]int{adminTok: 200})
		if n := strings.Count(log.String(), "tokens file changed but not taken"); n != 1 {
			t.Errorf("%s: warned %d times, want once:\n%s", bad.name, n, log.String())
		}
	}

	write("admin " + adminTok + "\n")
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	check("open to others", map[string]int{adminTok: 200, newWorker: 200})
	if !strings.Contains(log.String(), "chmod 600") {
		t.Errorf("a file open to others is not named:\n%s", log.String())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	check("removed", map[string]int{adminTok: 200, newWorker: 200})

	// Replaced by a rename over it (a Kubernetes secret volume's swap):
	// another file, whatever its time and size.
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte("admin "+adminTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, stamp, stamp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	check("renamed over", map[string]int{adminTok: 200, newWorker: 401})
}

// TestTokenFileSettles: a tokens file is taken once it has stayed
// unchanged for settleTokens. Written a line at a time (a shell's printf
// into it, by hand), it was read between two writes, valid but short, and
// a running worker whose line came later was refused and exited.
func TestTokenFileSettles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	long := time.Now().Add(-time.Hour)
	write := func(body string, stamp time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}
	const newWorker = "worker-token-abcdefghij"
	write("admin "+adminTok+"\nworker "+workerTok+"\n", long)
	f, err := OpenTokens(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.f.now = func() time.Time { return now }
	check := func(when string, want map[string]bool) {
		t.Helper()
		for tok, ok := range want {
			if _, got := f.Role(tok); got != ok {
				t.Errorf("%s: token %s known %v, want %v", when, tok, got, ok)
			}
		}
	}
	write("admin "+adminTok+"\n", now) // the first line of a rewrite
	check("half written", map[string]bool{adminTok: true, workerTok: true})
	write("admin "+adminTok+"\nworker "+workerTok+"\nworker "+newWorker+"\n", now)
	check("written, not settled", map[string]bool{workerTok: true, newWorker: false})
	now = now.Add(settleTokens)
	check("settled", map[string]bool{workerTok: true, newWorker: true})

	// Stamped ahead of this host's clock: taken once seen unchanged for
	// settleTokens.
	write("admin "+adminTok+"\n", now.Add(time.Hour))
	check("ahead, first seen", map[string]bool{adminTok: true, workerTok: true})
	now = now.Add(settleTokens / 2)
	check("ahead, seen a while", map[string]bool{workerTok: true})
	now = now.Add(settleTokens / 2)
	check("ahead, settled", map[string]bool{adminTok: true, workerTok: false})
}

// TestNodeTokenFollowsItsFile: a node's own token file is followed as the
// coordinator's tokens file is: a new token counts once the file has
// settled, and a change that leaves no valid token keeps the last good
// one, warning once per error.
func TestNodeTokenFollowsItsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker.token")
	const newTok, newerTok = "worker-token-new-0123456789", "worker-token-newer-0123456789"
	now := time.Now()
	stamp := now.Add(-time.Hour)
	write := func(body string, mode os.FileMode, settled bool) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		stamp = stamp.Add(time.Second) // apart from the last write's
		at := stamp
		if !settled {
			at = now
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	write("worker "+workerTok+"\n", 0o600, true)
	var log bytes.Buffer
	nt, err := OpenNodeToken(path, RoleWorker, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	nt.f.now = func() time.Time { return now }
	check := func(when, want string) {
		t.Helper()
		if got := nt.Token(); got != want {
			t.Errorf("%s: token %q, want %q", when, got, want)
		}
	}
	check("opened", workerTok)
	write("worker "+newTok+"\n", 0o600, false)
	check("rotated, not settled", workerTok)
	now = now.Add(settleTokens)
	check("rotated, settled", newTok)
	if !strings.Contains(log.String(), "token file reloaded") {
		t.Errorf("no reload logged: %s", log.String())
	}

	// Broken changes keep the token in force, each warned of once.
	write("read "+readTok+"\n", 0o600, true) // no line that grants worker
	check("no worker line", newTok)
	check("no worker line, again", newTok)
	write(newerTok+"\n", 0o644, true)
	check("open to others", newTok)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	check("removed", newTok)
	if n := strings.Count(log.String(), "token file changed but not taken"); n != 3 {
		t.Errorf("%d warnings for three broken changes:\n%s", n, log.String())
	}
	write(newerTok+"\n", 0o600, true) // a token alone
	check("fixed", newerTok)
}
