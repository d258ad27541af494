package evict

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every test here points BaseURL at an httptest server: the real metadata
// addresses are never contacted.

const actionDoc = `{"action": "terminate", "time": "2026-07-08T09:10:11Z"}`

var actionTime = time.Date(2026, 7, 8, 9, 10, 11, 0, time.UTC)

// fakeIMDS is an EC2 metadata service whose answers the test scripts.
type fakeIMDS struct {
	// put answers the n-th token request (from 0): a status, and for
	// 200 the token.
	put func(n int) (int, string)
	// get answers the n-th instance-action request given its token.
	get func(n int, token string) (int, string)

	mu     sync.Mutex
	puts   int
	gets   int
	tokens []string // the token header of each GET, "" for none
}

func (f *fakeIMDS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodPut && r.URL.Path == awsTokenPath:
		if r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") != "21600" {
			http.Error(w, "missing ttl", http.StatusBadRequest)
			return
		}
		code, tok := f.put(f.puts)
		f.puts++
		w.WriteHeader(code)
		fmt.Fprint(w, tok)
	case r.Method == http.MethodGet && r.URL.Path == awsActionPath:
		tok := r.Header.Get("X-aws-ec2-metadata-token")
		f.tokens = append(f.tokens, tok)
		code, body := f.get(f.gets, tok)
		f.gets++
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeIMDS) counts() (puts, gets int, tokens []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.puts, f.gets, append([]string(nil), f.tokens...)
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestAWSIMDSv2(t *testing.T) {
	f := &fakeIMDS{
		put: func(int) (int, string) { return 200, "tok-1" },
		get: func(n int, tok string) (int, string) {
			if tok != "tok-1" {
				return 401, ""
			}
			if n < 2 {
				return 404, ""
			}
			return 200, actionDoc
		},
	}
	r := start(t, AWS{BaseURL: serve(t, f), Poll: 5 * time.Millisecond})
	n := r.notice(t)
	if n.Source != "aws" || !n.Deadline.Equal(actionTime) || !strings.Contains(n.Detail, "terminate") {
		t.Fatalf("notice %+v, want source aws, deadline %v, action terminate", n, actionTime)
	}
	puts, gets, tokens := f.counts()
	if puts != 1 || gets != 3 {
		t.Fatalf("%d token requests and %d polls, want 1 and 3 (token reused)", puts, gets)
	}
	for i, tok := range tokens {
		if tok != "tok-1" {
			t.Fatalf("poll %d sent token %q", i, tok)
		}
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	r.noMoreNotices(t)
}

func TestAWSIMDSv1Fallback(t *testing.T) {
	for _, refuse := range []int{403, 404, 405} {
		t.Run(fmt.Sprint(refuse), func(t *testing.T) {
			f := &fakeIMDS{
				put: func(int) (int, string) { return refuse, "" },
				get: func(n int, tok string) (int, string) {
					if n < 2 {
						return 404, ""
					}
					return 200, actionDoc
				},
			}
			n := start(t, AWS{BaseURL: serve(t, f), Poll: 5 * time.Millisecond}).notice(t)
			if !n.Deadline.Equal(actionTime) {
				t.Fatalf("notice %+v, want deadline %v", n, actionTime)
			}
			puts, _, tokens := f.counts()
			if puts != 1 {
				t.Fatalf("%d token requests after a %d, want 1 (stay on IMDSv1)", puts, refuse)
			}
			for i, tok := range tokens {
				if tok != "" {
					t.Fatalf("poll %d sent token %q on IMDSv1", i, tok)
				}
			}
		})
	}
}

func TestAWSTransientErrors(t *testing.T) {
	f := &fakeIMDS{
		put: func(n int) (int, string) {
			if n == 0 {
				return 500, ""
			}
			return 200, "tok"
		},
		get: func(n int, tok string) (int, string) {
			if n < 3 {
				return 500, "internal error"
			}
			return 200, actionDoc
		},
	}
	n := start(t, AWS{BaseURL: serve(t, f), Poll: 5 * time.Millisecond}).notice(t)
	if !n.Deadline.Equal(actionTime) {
		t.Fatalf("notice %+v, want deadline %v", n, actionTime)
	}
	// The failed PUT must have been retried, not taken as "no IMDSv2".
	if _, _, tokens := f.counts(); tokens[len(tokens)-1] != "tok" {
		t.Fatalf("tokens sent %q, want the last poll to carry the token", tokens)
	}
}

func TestAWSTokenRenewedAfter401(t *testing.T) {
	f := &fakeIMDS{
		put: func(n int) (int, string) { return 200, fmt.Sprintf("tok-%d", n) },
		get: func(n int, tok string) (int, string) {
			if tok != "tok-1" { // the first token is revoked
				return 401, ""
			}
			return 200, actionDoc
		},
	}
	n := start(t, AWS{BaseURL: serve(t, f), Poll: 5 * time.Millisecond}).notice(t)
	if !n.Deadline.Equal(actionTime) {
		t.Fatalf("notice %+v, want deadline %v", n, actionTime)
	}
	if puts, _, _ := f.counts(); puts != 2 {
		t.Fatalf("%d token requests, want 2", puts)
	}
}

func TestAWSRequestTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release) // before srv.Close, which waits for handlers
	var mu sync.Mutex
	gets := 0
	base := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			w.WriteHeader(404) // IMDSv1 only
			return
		}
		mu.Lock()
		gets++
		first := gets == 1
		mu.Unlock()
		if first {
			select { // hang until the client gives up
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		fmt.Fprint(w, actionDoc)
	}))
	n := start(t, AWS{BaseURL: base, Poll: 5 * time.Millisecond, Timeout: 50 * time.Millisecond}).notice(t)
	if !n.Deadline.Equal(actionTime) {
		t.Fatalf("notice %+v, want deadline %v", n, actionTime)
	}
}

func TestAWSUnreadableDocument(t *testing.T) {
	f := &fakeIMDS{
		put: func(int) (int, string) { return 200, "tok" },
		get: func(int, string) (int, string) { return 200, "<html>" },
	}
	n := start(t, AWS{BaseURL: serve(t, f), Poll: 5 * time.Millisecond}).notice(t)
	if n.Source != "aws" || !n.Deadline.IsZero() || !strings.Contains(n.Detail, "<html>") {
		t.Fatalf("notice %+v, want an aws notice without deadline naming the document", n)
	}
}

func TestMetadataBadBaseURL(t *testing.T) {
	for _, s := range []Source{AWS{BaseURL: "169.254.169.254"}, GCP{BaseURL: "::"}} {
		r := start(t, s)
		select {
		case err := <-r.done:
			r.stopped, r.err = true, err
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("%T: Watch = %v, want ErrBadConfig", s, err)
			}
		case <-time.After(wait):
			t.Fatalf("%T with a bad base URL did not fail", s)
		}
	}
}

func TestMetadataBaseDefaults(t *testing.T) {
	// Checked without a request: the defaults are the real services.
	for _, c := range []struct{ in, def, want string }{
		{"", DefaultAWSBase, "http://169.254.169.254"},
		{"", DefaultGCPBase, "http://metadata.google.internal"},
		{"http://127.0.0.1:8080/", DefaultAWSBase, "http://127.0.0.1:8080"},
	} {
		if got, err := metadataBase(c.in, c.def); err != nil || got != c.want {
			t.Errorf("metadataBase(%q, %q) = %q, %v; want %q", c.in, c.def, got, err, c.want)
		}
	}
}

func TestGCP(t *testing.T) {
	var mu sync.Mutex
	polls := 0
	base := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != gcpPath || r.Header.Get("Metadata-Flavor") != "Google" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		mu.Lock()
		polls++
		n := polls
		mu.Unlock()
		switch {
		case n == 1:
			fmt.Fprint(w, "FALSE")
		case n == 2:
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
		case n == 3:
			fmt.Fprint(w, "FALSE")
		default:
			fmt.Fprint(w, "TRUE")
		}
	}))
	before := time.Now()
	r := start(t, GCP{BaseURL: base, Poll: 5 * time.Millisecond})
	n := r.notice(t)
	after := time.Now()
	if n.Source != "gcp" || n.Deadline.Before(before.Add(GCPNotice)) || n.Deadline.After(after.Add(GCPNotice)) {
		t.Fatalf("notice %+v, want source gcp and deadline 30 s after it was seen", n)
	}
	mu.Lock()
	seen := polls
	mu.Unlock()
	if seen != 4 {
		t.Fatalf("%d polls, want 4 (FALSE, 503, FALSE, TRUE)", seen)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	r.noMoreNotices(t)
}
