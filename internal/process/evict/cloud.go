package evict

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	// DefaultAWSBase is the EC2 instance metadata service.
	DefaultAWSBase = "http://169.254.169.254"
	// DefaultGCPBase is the Compute Engine metadata server.
	DefaultGCPBase = "http://metadata.google.internal"
	// DefaultMetadataPoll is how often AWS and GCP ask when Poll is zero.
	// AWS suggests every 5 s; a notice seen 4 s earlier is 4 s more drain.
	DefaultMetadataPoll = time.Second
	// DefaultMetadataTimeout bounds one metadata request when Timeout is
	// zero, so a hung request cannot delay the next poll for long.
	DefaultMetadataTimeout = time.Second
	// GCPNotice is how long a preempted Compute Engine VM has after the
	// preempted flag turns TRUE.
	GCPNotice = 30 * time.Second

	awsTokenPath  = "/latest/api/token"
	awsActionPath = "/latest/meta-data/spot/instance-action"
	gcpPath       = "/computeMetadata/v1/instance/preempted"

	// awsTokenTTL is the IMDSv2 token lifetime asked for (the maximum);
	// the token is renewed a minute before it runs out.
	awsTokenTTL    = 21600 * time.Second
	awsTokenRenew  = awsTokenTTL - time.Minute
	maxMetadataLen = 64 << 10
)

// AWS polls the EC2 spot instance-action metadata, which answers 404 until
// the instance is to be interrupted and then, about two minutes ahead,
// {"action": "terminate"|"stop"|"hibernate", "time": "2026-...Z"}; the time
// is the notice's deadline.
//
// It uses IMDSv2 (a session token from PUT /latest/api/token) and falls
// back to IMDSv1 when the PUT is refused with 403, 404 or 405. When the PUT
// fails otherwise (say, it times out in a container beyond the token's hop
// limit) that poll still tries without a token; a 401 makes the next poll
// fetch a token again. Every failure is retried on the next poll.
type AWS struct {
	BaseURL string        // default DefaultAWSBase; tests point it at a local server
	Poll    time.Duration // default DefaultMetadataPoll
	Timeout time.Duration // per request; default DefaultMetadataTimeout
}

// Watch implements Source. It returns an error only for a bad BaseURL.
func (a AWS) Watch(ctx context.Context, out chan<- Notice) error {
	base, err := metadataBase(a.BaseURL, DefaultAWSBase)
	if err != nil {
		return fmt.Errorf("evict: aws: %w", err)
	}
	m := newMetadataClient(a.Timeout)
	defer m.c.CloseIdleConnections()
	var (
		token    string
		tokenAt  time.Time
		v1       bool // the service refused to issue tokens
		tokenReq = map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": fmt.Sprint(int(awsTokenTTL / time.Second))}
	)
	poll(ctx, orDefault(a.Poll, DefaultMetadataPoll), func(ctx context.Context) (Notice, bool) {
		if !v1 && (token == "" || time.Since(tokenAt) > awsTokenRenew) {
			code, body, err := m.do(ctx, http.MethodPut, base+awsTokenPath, tokenReq)
			switch {
			case err != nil:
				// Keep an old token, if any: it may still be good.
			case code == http.StatusOK:
				token, tokenAt = strings.TrimSpace(string(body)), time.Now()
			case code == http.StatusForbidden, code == http.StatusNotFound, code == http.StatusMethodNotAllowed:
				v1, token = true, ""
			}
		}
		var hdr map[string]string
		if token != "" {
			hdr = map[string]string{"X-aws-ec2-metadata-token": token}
		}
		code, body, err := m.do(ctx, http.MethodGet, base+awsActionPath, hdr)
		switch {
		case err != nil:
			return Notice{}, false
		case code == http.StatusUnauthorized:
			// Token expired or revoked, or IMDSv1 turned off: get a
			// new token next time.
			v1, token = false, ""
			return Notice{}, false
		case code != http.StatusOK:
			return Notice{}, false // 404: no interruption scheduled
		}
		return awsNotice(body), true
	}, out)
	return nil
}

// awsNotice reads an instance-action document. A 200 means an action is
// scheduled even if the document cannot be read, so a bad one is still a
// notice, with no deadline.
func awsNotice(body []byte) Notice {
	var ia struct {
		Action string `json:"action"`
		Time   string `json:"time"`
	}
	n := Notice{Source: "aws"}
	if err := json.Unmarshal(body, &ia); err == nil {
		if t, err := time.Parse(time.RFC3339, ia.Time); err == nil {
			n.Deadline = t
			n.Detail = fmt.Sprintf("spot instance-action %s at %s", ia.Action, ia.Time)
			return n
		}
	}
	const show = 200
	if len(body) > show {
		body = body[:show]
	}
	n.Detail = fmt.Sprintf("spot instance-action with unreadable document %q", body)
	return n
}

// GCP polls the Compute Engine preempted flag, which turns TRUE when a
// spot or preemptible VM is being preempted; the VM then has GCPNotice, so
// the deadline is the time the flag was seen plus GCPNotice (late by up to
// one poll). Every failure is retried on the next poll.
type GCP struct {
	BaseURL string        // default DefaultGCPBase; tests point it at a local server
	Poll    time.Duration // default DefaultMetadataPoll
	Timeout time.Duration // per request; default DefaultMetadataTimeout
}

// Watch implements Source. It returns an error only for a bad BaseURL.
func (g GCP) Watch(ctx context.Context, out chan<- Notice) error {
	base, err := metadataBase(g.BaseURL, DefaultGCPBase)
	if err != nil {
		return fmt.Errorf("evict: gcp: %w", err)
	}
	m := newMetadataClient(g.Timeout)
	defer m.c.CloseIdleConnections()
	hdr := map[string]string{"Metadata-Flavor": "Google"}
	poll(ctx, orDefault(g.Poll, DefaultMetadataPoll), func(ctx context.Context) (Notice, bool) {
		code, body, err := m.do(ctx, http.MethodGet, base+gcpPath, hdr)
		if err != nil || code != http.StatusOK || strings.TrimSpace(string(body)) != "TRUE" {
			return Notice{}, false
		}
		return Notice{Source: "gcp", Deadline: time.Now().Add(GCPNotice), Detail: "instance preempted"}, true
	}, out)
	return nil
}

// metadataClient makes bounded requests to a metadata service.
type metadataClient struct {
	c       *http.Client
	timeout time.Duration
}

func newMetadataClient(timeout time.Duration) metadataClient {
	timeout = orDefault(timeout, DefaultMetadataTimeout)
	return metadataClient{
		timeout: timeout,
		c: &http.Client{Transport: &http.Transport{
			// Metadata services are link-local: an HTTP_PROXY from the
			// environment must not be used for them.
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     30 * time.Second,
		}},
	}
}

// do sends one request with its own timeout and returns the status and up
// to maxMetadataLen bytes of body.
func (m metadataClient) do(ctx context.Context, method, url string, hdr map[string]string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := m.c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataLen))
	return resp.StatusCode, body, err
}

// metadataBase checks and returns base, or def when base is empty, without
// a trailing slash.
func metadataBase(base, def string) (string, error) {
	if base == "" {
		base = def
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%w: base URL %q", ErrBadConfig, base)
	}
	return strings.TrimRight(base, "/"), nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
