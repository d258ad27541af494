package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestReachShortDeadline: a coordinator that answers is reached within a
// caller's deadline under a second. The deadline was rounded to whole
// seconds, to 0 under half a second, and checkpoint --wait --timeout
// 400ms said a live coordinator was unreachable.
func TestReachShortDeadline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 480*time.Millisecond)
	defer cancel()
	if err := reach(ctx, api.NewClient(srv.URL, nil), io.Discard, 30*time.Second); err != nil {
		t.Fatalf("reach with 480ms left: %v", err)
	}
}
