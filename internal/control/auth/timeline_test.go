package auth

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
)

// TestRefusalsOnTheTimeline serves a coordinator behind the guard as
// `terrace coordinator --tokens` does, and checks that a refused request
// is an event on its timeline, and that a burst of refusals is not an
// event each: the timeline is bounded, and a stranger must not be able to
// push everything else out of it.
func TestRefusalsOnTheTimeline(t *testing.T) {
	toks, err := ParseTokens(strings.NewReader("admin " + adminTok + "\nworker " + workerTok + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := NewGuard(toks, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := coord.New(coord.Options{Servers: 1, Workers: 1, Partitions: 2, Wrap: g.WrapReporting})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go c.Serve(ctx, ln, slog.New(slog.NewTextHandler(io.Discard, nil)))
	url := "http://" + ln.Addr().String()
	refused := func(token string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/checkpoint", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			t.Fatalf("checkpoint with token %q: status %d, want a refusal", token, resp.StatusCode)
		}
	}
	refused(workerTok)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	var first []api.Event
	for seq := uint64(0); len(first) == 0; {
		evs := c.Events(wctx, seq, true)
		if wctx.Err() != nil {
			t.Fatal("no refusal event on the timeline within 10 s")
		}
		for _, e := range evs {
			seq = e.Seq
			if e.Kind == api.EventRefused {
				first = append(first, e)
			}
		}
	}
	if !strings.Contains(first[0].Cause, "/v1/checkpoint") || !strings.Contains(first[0].Cause, "forbidden") && !strings.Contains(first[0].Cause, "role") {
		t.Errorf("refusal event's cause %q does not name the route and the reason", first[0].Cause)
	}
	const burst = 100
	for range burst {
		refused("")
	}
	n := 0
	for _, e := range c.Events(ctx, 0, false) {
		if e.Kind == api.EventRefused {
			n++
		}
	}
	// One event a second at most: the burst takes well under its 100 s.
	if n > burst/4 {
		t.Errorf("%d refusal events for %d refusals: the timeline is not protected from a flood", n, burst+1)
	}
}
