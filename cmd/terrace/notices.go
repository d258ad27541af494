package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/internal/process/evict"
)

// noticeFlags choose where a server or worker learns that its machine is
// about to go.
type noticeFlags struct {
	grace       time.Duration
	file        string
	httpAddr    string
	awsMetadata string
	gcpMetadata string
}

func (n *noticeFlags) register(fs *pflag.FlagSet) {
	fs.DurationVar(&n.grace, "grace", 30*time.Second, "time a drain may take when a notice gives no deadline (SIGTERM always starts one)")
	fs.StringVar(&n.file, "evict-file", "", "start a drain when this file appears (its content may be an RFC 3339 deadline)")
	fs.StringVar(&n.httpAddr, "evict-http", "", "serve POST /evict on this local address to start a drain")
	fs.StringVar(&n.awsMetadata, "aws-metadata", "", "poll an AWS instance-metadata base URL for spot/instance-action (e.g. http://169.254.169.254)")
	fs.StringVar(&n.gcpMetadata, "gcp-metadata", "", "poll a GCP metadata base URL for instance/preempted (e.g. http://metadata.google.internal)")
}

// watch merges the configured sources; the first notice starts the drain.
func (n *noticeFlags) watch(ctx context.Context) <-chan evict.Notice {
	sources := []evict.Source{evict.Catch(syscall.SIGTERM)} // caught at once, not when its goroutine runs
	if n.file != "" {
		sources = append(sources, evict.File{Path: n.file})
	}
	if n.httpAddr != "" {
		sources = append(sources, evict.HTTP{Addr: n.httpAddr, OnListen: func(addr string) {
			fmt.Fprintf(os.Stderr, "terrace: eviction endpoint on http://%s/evict\n", addr)
		}})
	}
	if n.awsMetadata != "" {
		sources = append(sources, evict.AWS{BaseURL: n.awsMetadata})
	}
	if n.gcpMetadata != "" {
		sources = append(sources, evict.GCP{BaseURL: n.gcpMetadata})
	}
	return evict.MergeWithErrors(ctx, n.grace, func(err error) { fmt.Fprintln(os.Stderr, "terrace: notice source:", err) }, sources...)
}
