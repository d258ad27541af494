package auth

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Role is what a token allows.
type Role string

// The roles. Admin may do everything; server and worker may also read.
const (
	RoleWorker Role = "worker"
	RoleServer Role = "server"
	RoleAdmin  Role = "admin"
	RoleRead   Role = "read"
)

// Roles lists every role, in the order a new tokens file names them.
var Roles = []Role{RoleAdmin, RoleServer, RoleWorker, RoleRead}

// Grants reports whether a token of role r may act as need.
func (r Role) Grants(need Role) bool {
	return r == need || r == RoleAdmin || need == RoleRead
}

// ErrInvalid: a tokens file is malformed.
var ErrInvalid = errors.New("auth: invalid tokens")

// EnvToken is the environment variable a node's join token may come from,
// so that it never appears in a command line that `ps` shows.
const EnvToken = "TERRACE_TOKEN"

// Tokens maps the SHA-256 of each token to its role: the coordinator
// keeps no token in memory, and looking one up leaks nothing of it.
type Tokens struct {
	roles map[[32]byte]Role
}

// ParseTokens reads lines of "role token"; blank lines and lines starting
// with # are skipped. Several tokens may share a role (to rotate one).
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{roles: map[[32]byte]Role{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 || !slices.Contains(Roles, Role(f[0])) {
			return nil, fmt.Errorf("%w: line %d: want \"role token\" with role one of %v", ErrInvalid, n, Roles)
		}
		if len(f[1]) < 16 {
			return nil, fmt.Errorf("%w: line %d: token shorter than 16 characters", ErrInvalid, n)
		}
		t.roles[sha256.Sum256([]byte(f[1]))] = Role(f[0])
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.roles) == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrInvalid)
	}
	return t, nil
}

// LoadTokens reads a tokens file; one that others may read is refused
// (openPrivate).
func LoadTokens(path string) (*Tokens, error) {
	f, err := openPrivate(path, "tokens file")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return t, nil
}

// A TokenSet names the role of a token: Tokens, or a TokenFile that
// follows its file.
type TokenSet interface {
	Role(token string) (Role, bool)
}

// TokenFile serves the tokens of a file, re-read whenever it changes
// (another file, modification time or size), checked at every lookup: a
// token added or revoked by editing the file counts from the next request,
// with no restart, as rotated certificates do (pki.Source). A stat costs
// about 1.5 µs, under a hundredth of a request's handling, so a revoked
// token is refused at once rather than after a polling interval. A change
// that leaves the file unreadable, open to others or invalid keeps the
// tokens in force and warns once for each new error: a half-done edit
// must not lock every node out. A change is taken once it has settled
// (settleTokens): a file written a line at a time was read between two
// writes, valid but short, and the nodes whose lines were not yet written
// were refused and exited.
type TokenFile struct{ f *followed[*Tokens] }

// settleTokens is how long a changed token file must stay unchanged
// before it is taken: by its modification time, or, for one stamped
// ahead of this host's clock (a network file system's), since it was
// first seen. A revocation so holds within half a second, not at the
// very next request; a writer paused longer than that mid-file is still
// read half-written.
const settleTokens = 500 * time.Millisecond

// OpenTokens loads the tokens file at path, failing as LoadTokens does;
// later changes are logged to log (slog.Default if nil).
func OpenTokens(path string, log *slog.Logger) (*TokenFile, error) {
	f, err := follow(path, "tokens file", log, LoadTokens)
	if err != nil {
		return nil, err
	}
	f.reloaded = "tokens file reloaded: its tokens count from this request on"
	f.notTaken = "tokens file changed but not taken: the tokens in force stay until it is fixed"
	f.attrs = func(t *Tokens) []any { return []any{"tokens", len(t.roles)} }
	return &TokenFile{f}, nil
}

// Role returns the role of token under the file as it is now, or as it
// last was valid.
func (f *TokenFile) Role(token string) (Role, bool) {
	return f.f.current().Role(token)
}

// NodeToken is a node's own join token, read from its token file
// (ReadToken) and followed as the coordinator's TokenFile follows its
// file: a new token written there is presented from the next request on,
// with no restart, and a change that leaves the file without a valid
// token keeps the token in force and warns once for each new error.
type NodeToken struct{ f *followed[string] }

// OpenNodeToken reads the token of role in the file at path, failing as
// ReadToken does; later changes are logged to log (slog.Default if nil).
func OpenNodeToken(path string, role Role, log *slog.Logger) (*NodeToken, error) {
	f, err := follow(path, "token file", log, func(path string) (string, error) {
		return ReadToken(path, role, nil)
	})
	if err != nil {
		return nil, err
	}
	f.reloaded = "token file reloaded: this node presents its new token from this request on"
	f.notTaken = "token file changed but not taken: this node presents its last good token until it is fixed"
	return &NodeToken{f}, nil
}

// Token returns the token of the file as it is now, or as it last was
// valid.
func (t *NodeToken) Token() string { return t.f.current() }

// followed is a file of tokens and what was last loaded from it, loaded
// again once a change has settled (settleTokens), and kept when the
// change does not load. It serves TokenFile and NodeToken, so that the
// coordinator's tokens and a node's own follow their files one way.
type followed[T any] struct {
	path string
	what string // "tokens file", "token file"
	log  *slog.Logger
	now  func() time.Time
	load func(path string) (T, error)
	// What a reload and a change not taken log, and the attributes of
	// what was loaded that they add.
	reloaded, notTaken string
	attrs              func(T) []any

	mu      sync.Mutex
	fi      os.FileInfo // of the file last loaded
	val     T
	warned  string      // the last error warned of, "" since a good load
	pending os.FileInfo // a change seen but not settled, since seen
	seen    time.Time
}

// follow loads the file at path (what names it in errors) and follows it.
func follow[T any](path, what string, log *slog.Logger, load func(string) (T, error)) (*followed[T], error) {
	if log == nil {
		log = slog.Default()
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", what, err)
	}
	v, err := load(path)
	if err != nil {
		return nil, err
	}
	return &followed[T]{path: path, what: what, log: log, now: time.Now, load: load, fi: fi, val: v,
		attrs: func(T) []any { return nil }}, nil
}

// current returns what the file holds now, or held when it last loaded.
func (f *followed[T]) current() T {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if err == nil && sameFile(fi, f.fi) {
		return f.val
	}
	if err == nil && !f.settled(fi) {
		return f.val
	}
	var v T
	if err == nil {
		v, err = f.load(f.path)
	} else {
		err = fmt.Errorf("auth: %s: %w", f.what, err)
	}
	if err != nil {
		if err.Error() != f.warned {
			f.warned = err.Error()
			f.log.Warn(f.notTaken, append([]any{"file", f.path, "err", err}, f.attrs(f.val)...)...)
		}
		return f.val
	}
	f.fi, f.val, f.warned = fi, v, ""
	f.log.Warn(f.reloaded, append([]any{"file", f.path}, f.attrs(v)...)...)
	return v
}

// settled says whether the changed file fi has stayed as it is for
// settleTokens, by its modification time or since it was first seen.
func (f *followed[T]) settled(fi os.FileInfo) bool {
	now := f.now()
	if f.pending == nil || !sameFile(fi, f.pending) {
		f.pending, f.seen = fi, now
	}
	return now.Sub(fi.ModTime()) >= settleTokens || now.Sub(f.seen) >= settleTokens
}

// sameFile says whether a and b are the same file unchanged: its
// identity, modification time and size.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// ErrExposed: a file of tokens that others than its owner may read or
// write: a token is a password, and a shared machine's other users could
// take it (ssh refuses private keys so, for the same reason).
var ErrExposed = errors.New("auth: token file open to others")

// openPrivate opens a file of tokens (what names it in errors), refusing
// one whose mode lets its group or others in.
func openPrivate(path, what string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", what, err)
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		err = fmt.Errorf("auth: %w", err)
	case fi.IsDir():
		// It was said to be open to others ("chmod 600 DIR").
		err = fmt.Errorf("auth: %s: %s is a directory: give the file", what, path)
	case fi.Mode().Perm()&0o077 != 0:
		err = fmt.Errorf("%w: %s has mode %04o: chmod 600 %s (a Kubernetes secret volume: defaultMode 0400; or give the token in $TERRACE_TOKEN)", ErrExposed, path, fi.Mode().Perm(), path)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Role returns the role of token, if it is known.
func (t *Tokens) Role(token string) (Role, bool) {
	r, ok := t.roles[sha256.Sum256([]byte(token))]
	return r, ok
}

// NewToken returns a fresh random token (256 bits, hex).
func NewToken() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// WriteNew writes a tokens file with one new token per role, mode 0600;
// it refuses to overwrite a file.
func WriteNew(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	fmt.Fprintln(f, "# Terrace join tokens: role token. Give each node only the line of its role.")
	for _, r := range Roles {
		fmt.Fprintf(f, "%s %s\n", r, NewToken())
	}
	return f.Close()
}

// ReadToken returns a node's token for role: from path if set, else from
// the environment variable EnvToken; "" if neither is set. The file holds
// either the token alone or "role token" lines, of which the one of role
// is taken, else one whose role grants it (an admin's, or any for read),
// so that a node can be given the cluster's tokens file in a test, or
// only its own line in production, and `terrace status` runs with any
// node's file. A file others may read is refused (openPrivate).
func ReadToken(path string, role Role, getenv func(string) string) (string, error) {
	if path == "" {
		return strings.TrimSpace(getenv(EnvToken)), nil
	}
	f, err := openPrivate(path, "token file")
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("auth: token file %s: %w", path, err)
	}
	var lines [][]string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, strings.Fields(l))
		}
	}
	if len(lines) == 1 && len(lines[0]) == 1 {
		return lines[0][0], nil
	}
	granting, held := "", []string{}
	for _, f := range lines {
		if len(f) != 2 {
			continue
		}
		if r := Role(f[0]); r == role {
			return f[1], nil
		} else if granting == "" && r.Grants(role) {
			granting = f[1]
		}
		held = append(held, f[0])
	}
	if granting != "" {
		return granting, nil
	}
	if len(held) == 0 {
		return "", fmt.Errorf("%w: token file %s holds neither a token alone nor \"role token\" lines: give it the %q line of the cluster's tokens file", ErrInvalid, path, role)
	}
	return "", fmt.Errorf("%w: token file %s holds no token that grants the %s role (its roles: %s): give it the %q line of the cluster's tokens file",
		ErrInvalid, path, role, strings.Join(held, ", "), role)
}
