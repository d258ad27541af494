package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// MaxBody is the largest request body any route takes: a progress report
// with two partition states of api.MaxStateBytes, base64-encoded. Larger
// bodies are refused before they are read.
const MaxBody = api.MaxStateBytes/3*8 + 2<<20

// maxJoinBody bounds how much of a join's body is read to learn the role
// it asks for.
const maxJoinBody = 64 << 10

// open routes need no token: the health check says only that something
// answers, and nodes call it before they join.
var open = []string{api.RouteHealth}

// policy names the role each route needs. Routes not listed need read if
// they are GETs and admin otherwise, so that a route added later is
// closed until someone decides who may call it.
var policy = map[string]Role{
	api.RouteJoin:    RoleAdmin, // in fact the role the join asks for: see need
	api.RouteLayout:  RoleRead,
	api.RouteReports: RoleRead,

	api.RouteTables:    RoleWorker,
	api.RouteReport:    RoleWorker,
	api.RouteHeartbeat: RoleWorker,
	api.RouteLeave:     RoleWorker,
	api.RouteAcquire:   RoleWorker,
	api.RouteProgress:  RoleWorker,
	api.RouteSplit:     RoleWorker,
	api.RouteState:     RoleWorker,
	api.RouteNotice:    RoleWorker,

	api.RouteServerLeave:  RoleServer,
	api.RouteSynced:       RoleServer,
	api.RouteRebuilt:      RoleServer,
	api.RouteCheckpointed: RoleServer,
	api.RouteRestored:     RoleServer,
	api.RouteLoss:         RoleServer,

	api.RouteCheckpoint: RoleAdmin,

	// A worker started with flags offers its job: the first one defines
	// the cluster's job, and a conflicting one is refused (job_conflict),
	// so a worker's token cannot replace a job in force.
	api.RouteJob:        RoleWorker,
	api.RouteEvalClaim:  RoleWorker,
	api.RouteEvalResult: RoleWorker,
}

// Guard checks tokens in front of a coordinator's handler.
type Guard struct {
	tokens TokenSet
	log    *slog.Logger
	// refused, when set, hears every refusal too (the coordinator's event
	// timeline).
	refused func(peer, cause string)
	routes  *http.ServeMux
	// Policy overrides or extends the role each route pattern needs (the
	// dashboard's, the jobs API's); nil uses the defaults above.
	Policy map[string]Role
}

// NewGuard returns a Guard that admits the holders of tokens and logs
// refusals to log (slog.Default if nil).
func NewGuard(tokens TokenSet, log *slog.Logger) *Guard {
	if log == nil {
		log = slog.Default()
	}
	return &Guard{tokens: tokens, log: log}
}

// WrapReporting returns next behind the guard, which also tells refused
// of every request it refuses (coord.Options.Wrap's form).
func (g *Guard) WrapReporting(next http.Handler, refused func(peer, cause string)) http.Handler {
	g.refused = refused
	return g.Wrap(next)
}

// Wrap returns next behind the guard.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	// The route patterns are matched by a ServeMux of markers, exactly as
	// the coordinator's own mux matches them.
	g.routes = http.NewServeMux()
	for _, p := range open {
		g.routes.Handle(p, marker(""))
	}
	for p, r := range policy {
		if _, ok := g.Policy[p]; !ok {
			g.routes.Handle(p, marker(r))
		}
	}
	for p, r := range g.Policy {
		g.routes.Handle(p, marker(r))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxBody {
			g.refuse(w, r, "", fmt.Errorf("%w: body of %d bytes is over %d", api.ErrBadRequest, r.ContentLength, MaxBody), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
		need, err := g.need(r)
		if err != nil {
			g.refuse(w, r, need, err, 0)
			return
		}
		if need == "" {
			next.ServeHTTP(w, r)
			return
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || tok == "" {
			g.refuse(w, r, need, fmt.Errorf("%w: request carries no token (give the node --token-file or $%s)", api.ErrUnauthenticated, EnvToken), 0)
			return
		}
		has, ok := g.tokens.Role(tok)
		if !ok {
			g.refuse(w, r, need, fmt.Errorf("%w: unknown token", api.ErrUnauthenticated), 0)
			return
		}
		if !has.Grants(need) {
			g.refuse(w, r, need, fmt.Errorf("%w: a %s token may not act as %s", api.ErrForbidden, has, need), 0)
			return
		}
		next.ServeHTTP(w, r)
	})
}

type marker Role

func (marker) ServeHTTP(http.ResponseWriter, *http.Request) {}

// need returns the role r needs ("" for none). A join needs the role it
// asks for, read from its body, which is then put back for the handler.
func (g *Guard) need(r *http.Request) (Role, error) {
	h, pattern := g.routes.Handler(r)
	m, ok := h.(marker)
	if pattern == "" || !ok {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			return RoleRead, nil
		}
		return RoleAdmin, nil
	}
	if pattern != api.RouteJoin {
		return Role(m), nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxJoinBody+1))
	if err != nil {
		return RoleAdmin, fmt.Errorf("%w: join: %v", api.ErrBadRequest, err)
	}
	if len(b) > maxJoinBody {
		return RoleAdmin, fmt.Errorf("%w: join body over %d bytes", api.ErrBadRequest, maxJoinBody)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	var j api.Join
	if err := json.Unmarshal(b, &j); err != nil {
		return RoleAdmin, fmt.Errorf("%w: join: %v", api.ErrBadRequest, err)
	}
	switch j.Role {
	case api.RoleServer:
		return RoleServer, nil
	case api.RoleWorker:
		return RoleWorker, nil
	}
	return RoleAdmin, fmt.Errorf("%w: join as unknown role %q", api.ErrBadRequest, j.Role)
}

// refuse answers with err's code (or status, if set) and logs the
// refusal: who asked, for what, and why.
func (g *Guard) refuse(w http.ResponseWriter, r *http.Request, need Role, err error, status int) {
	g.log.Warn("refused request", "peer", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "needs", string(need), "err", err)
	if g.refused != nil {
		g.refused(r.RemoteAddr, fmt.Sprintf("%s %s: %v", r.Method, r.URL.Path, err))
	}
	code := api.CodeOf(err)
	if status == 0 {
		status = code.Status()
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		status = http.StatusRequestEntityTooLarge
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.ErrorReply{Code: code, Error: err.Error()})
}
