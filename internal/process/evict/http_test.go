package evict

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startHTTP runs an HTTP source on a free loopback port and returns it
// with the endpoint's URL.
func startHTTP(t *testing.T) (*running, string) {
	t.Helper()
	addrs := make(chan string, 1)
	r := start(t, HTTP{Addr: "127.0.0.1:0", OnListen: func(a string) { addrs <- a }})
	select {
	case a := <-addrs:
		return r, "http://" + a + "/evict"
	case err := <-r.done:
		r.stopped, r.err = true, err
		t.Fatalf("Watch returned %v before listening", err)
	case <-time.After(wait):
		t.Fatal("OnListen not called")
	}
	return nil, ""
}

// client does not keep connections, so no idle connection outlives a test.
var client = &http.Client{Timeout: wait, Transport: &http.Transport{DisableKeepAlives: true}}

// call makes one request and decodes the status it answers.
func call(t *testing.T, method, url, body string) (int, status) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st status
	if resp.StatusCode != http.StatusMethodNotAllowed {
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatalf("%s %s: %d, body not JSON: %v", method, url, resp.StatusCode, err)
		}
	}
	return resp.StatusCode, st
}

func TestHTTPPostIn(t *testing.T) {
	r, url := startHTTP(t)
	if code, st := call(t, "GET", url, ""); code != http.StatusOK || st.Evicting {
		t.Fatalf("GET before any POST: %d %+v", code, st)
	}
	posted := time.Now()
	code, st := call(t, "POST", url+"?in=30s", "")
	if code != http.StatusAccepted || !st.Evicting || st.Deadline == "" {
		t.Fatalf("POST: %d %+v, want 202 with a deadline", code, st)
	}
	n := r.notice(t)
	if n.Source != "http" {
		t.Fatalf("notice %+v, want source http", n)
	}
	near(t, "deadline", n.Deadline, posted.Add(30*time.Second), time.Second)

	if code, st := call(t, "GET", url, ""); code != http.StatusOK || !st.Evicting {
		t.Fatalf("GET after POST: %d %+v", code, st)
	}
	// A repeat POST changes nothing and sends nothing.
	code, again := call(t, "POST", url+"?in=5s", "")
	if code != http.StatusOK || again.Deadline != st.Deadline {
		t.Fatalf("second POST: %d %+v, want 200 and the first deadline %s", code, again, st.Deadline)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	r.noMoreNotices(t)
}

func TestHTTPPostJSON(t *testing.T) {
	r, url := startHTTP(t)
	want := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	code, _ := call(t, "POST", url, `{"deadline": "2026-05-06T07:08:09Z", "detail": "drill 7"}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST: %d", code)
	}
	n := r.notice(t)
	if !n.Deadline.Equal(want) || n.Detail != "drill 7" {
		t.Fatalf("notice %+v, want deadline %v and detail %q", n, want, "drill 7")
	}
}

func TestHTTPPostBare(t *testing.T) {
	r, url := startHTTP(t)
	if code, _ := call(t, "POST", url, ""); code != http.StatusAccepted {
		t.Fatalf("POST: %d", code)
	}
	if n := r.notice(t); !n.Deadline.IsZero() || n.Source != "http" {
		t.Fatalf("notice %+v, want source http and no deadline", n)
	}
}

func TestHTTPBadRequests(t *testing.T) {
	r, url := startHTTP(t)
	for _, c := range []struct{ query, body string }{
		{"", `{"deadline": `},
		{"", `{"dedline": "2026-05-06T07:08:09Z"}`},
		{"", `{"deadline": "tomorrow"}`},
		{"?in=soon", ""},
		{"?in=-3s", ""},
		{"?in=3s", `{"deadline": "2026-05-06T07:08:09Z"}`},
	} {
		code, st := call(t, "POST", url+c.query, c.body)
		if code != http.StatusBadRequest || st.Error == "" || st.Evicting {
			t.Errorf("POST %s %s: %d %+v, want 400 with an error", c.query, c.body, code, st)
		}
	}
	if code, _ := call(t, "PUT", url, ""); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d, want 405", code)
	}
	if code, st := call(t, "GET", url, ""); code != http.StatusOK || st.Evicting {
		t.Fatalf("GET after bad requests: %d %+v, want no notice", code, st)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	r.noMoreNotices(t)
}

func TestHTTPStopsOnCancel(t *testing.T) {
	r, url := startHTTP(t)
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/evict")
	if err := r.stop(t); err != nil {
		t.Fatalf("Watch = %v, want nil after cancel", err)
	}
	if c, err := net.DialTimeout("tcp", addr, wait); err == nil {
		c.Close()
		t.Fatal("endpoint still accepts connections after Watch returned")
	}
}

func TestHTTPListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r := start(t, HTTP{Addr: ln.Addr().String()})
	select {
	case err := <-r.done:
		r.stopped, r.err = true, err
		if err == nil || !strings.Contains(err.Error(), "evict: http") {
			t.Fatalf("Watch = %v, want a listen error", err)
		}
	case <-time.After(wait):
		t.Fatal("Watch on a busy address did not fail")
	}
}
