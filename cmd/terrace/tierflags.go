package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/dataplane/link"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/process/node"
)

// machineFlags are the flags that place a node on a machine of a class
// (issue 11, docs/design/tiers.md).
type machineFlags struct {
	machine, class string
	// linkMbps and bindIP emulate the machine's link on one host.
	linkMbps float64
	bindIP   string
}

func (m *machineFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&m.machine, "machine", "", "the machine this node runs on (roles on one machine share its link); the node's ID if empty")
	fs.StringVar(&m.class, "class", "reliable", "the machine's class: reliable (on-demand) or transient (spot, revoked in bulk)")
	fs.Float64Var(&m.linkMbps, "link-mbps", 0, "emulate the machine's network link at this many Mbit/s each way (with --bind-ip; 0: not paced)")
	fs.StringVar(&m.bindIP, "bind-ip", "", "the emulated machine's loopback address (127.0.0.N): connections to other addresses cross its link")
}

// network returns the emulated machine's network, or nil without
// --bind-ip; errors name the flag.
func (m *machineFlags) network() (transport.Network, error) {
	if m.bindIP == "" {
		if m.linkMbps != 0 {
			return nil, fmt.Errorf("--link-mbps needs --bind-ip: the machine's own loopback address")
		}
		return nil, nil
	}
	if m.linkMbps < 0 {
		return nil, fmt.Errorf("--link-mbps %v: must be >= 0", m.linkMbps)
	}
	n, err := link.NewNetwork(m.bindIP, link.New(m.linkMbps*1e6/8, link.Options{}))
	if err != nil {
		return nil, fmt.Errorf("--bind-ip: %w", err)
	}
	return n, nil
}

// parse reads the flags; errors name the flag.
func (m *machineFlags) parse() (string, tier.Class, error) {
	c, err := tier.ParseClass(m.class)
	if err != nil {
		return "", 0, fmt.Errorf("--class: %w", err)
	}
	return m.machine, c, nil
}

// coordTierFlags are the coordinator's tier flags.
type coordTierFlags struct {
	class, stage, price, stageReason string
	syncInterval                     time.Duration
	fs                               *pflag.FlagSet // to tell a flag given from its default
}

func (t *coordTierFlags) register(fs *pflag.FlagSet) {
	t.fs = fs
	fs.StringVar(&t.class, "class", "reliable", "the class of this coordinator's machine; it runs only on reliable machines")
	fs.StringVar(&t.stage, "stage", "", "run tiers of reliability, forming in this stage (1, 2 or 3); empty: no tiers")
	fs.DurationVar(&t.syncInterval, "sync-interval", time.Second, "with --stage: how often an ActivePS streams its aggregated updates to its BackupPS")
	fs.StringVar(&t.stageReason, "stage-reason", "", "with --stage: why the cluster forms in that stage, shown by the status and the dashboard until a switch (terrace train --stage auto passes the planner's)")
	fs.StringVar(&t.price, "price", "", "dollars per machine-hour by class, e.g. reliable=0.21,transient=0.0364, for the cost so far in the status, the dashboard and /metrics; empty: no cost")
}

// apply checks the flags and sets what they say in o; errors name the flag.
func (t *coordTierFlags) apply(o *coord.Options) (tier.Class, error) {
	c, err := tier.ParseClass(t.class)
	if err != nil {
		return 0, fmt.Errorf("--class: %w", err)
	}
	if c == tier.Transient {
		return 0, fmt.Errorf("--class %s: %w", c, node.ErrTransientCoordinator)
	}
	if t.stage != "" {
		s, err := tier.ParseStage(t.stage)
		if err != nil {
			return 0, fmt.Errorf("--stage: %w", err)
		}
		o.Stage = s
	}
	if t.stageReason != "" && t.stage == "" {
		return 0, fmt.Errorf("--stage-reason needs --stage")
	}
	if t.stage == "" && t.fs != nil && t.fs.Changed("sync-interval") {
		// Without tiers nothing streams: the value was ignored.
		return 0, fmt.Errorf("--sync-interval needs --stage (without tiers no ActivePS streams to a BackupPS)")
	}
	o.StageReason = t.stageReason
	if t.syncInterval <= 0 {
		return 0, fmt.Errorf("--sync-interval %v: must be positive", t.syncInterval)
	}
	o.SyncInterval = t.syncInterval
	if o.Prices, err = tier.ParseByClass("--price", t.price, tier.ByClass{}); err != nil {
		return 0, err
	}
	return c, nil
}
