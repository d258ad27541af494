package drill

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrBadSchedule is wrapped by every error of ParseSchedule.
var ErrBadSchedule = errors.New("drill: bad fault schedule")

// Role is a kind of node.
type Role string

// The roles a fault can hit.
const (
	Coordinator Role = "coordinator"
	Server      Role = "server"
	Worker      Role = "worker"
)

// Action is what a fault does to a node.
type Action string

// The actions.
const (
	// Kill sends SIGKILL to the node's process group: no goodbye.
	Kill Action = "kill"
	// Evict gives the node notice that its machine is going: a POST to
	// its eviction endpoint if it announced one, SIGTERM otherwise.
	Evict Action = "evict"
)

// Planned is one fault of a schedule: Action on a node of Role, At after
// training starts.
type Planned struct {
	Action Action
	Role   Role
	At     time.Duration
}

func (p Planned) String() string { return fmt.Sprintf("%s %s@%s", p.Action, p.Role, p.At) }

// Schedule is a list of faults in the order they happen.
type Schedule []Planned

// ParseSchedule parses the --kill and --evict specs, each a comma-separated
// list of ROLE@DURATION items ("server@2s,worker@4.5s"; DURATION as Go's
// time.ParseDuration reads it, measured from the start of training), and
// returns their faults ordered by time; at equal times kills come first,
// then items in the order given. An empty spec has no faults.
func ParseSchedule(kill, evict string) (Schedule, error) {
	var s Schedule
	for _, in := range []struct {
		flag   string
		action Action
		spec   string
	}{{"--kill", Kill, kill}, {"--evict", Evict, evict}} {
		if strings.TrimSpace(in.spec) == "" {
			continue
		}
		for i, item := range strings.Split(in.spec, ",") {
			p, err := parseItem(in.action, strings.TrimSpace(item))
			if err != nil {
				return nil, fmt.Errorf("%w: %s item %d %q: %w", ErrBadSchedule, in.flag, i+1, item, err)
			}
			s = append(s, p)
		}
	}
	slices.SortStableFunc(s, func(a, b Planned) int { return cmp.Compare(a.At, b.At) })
	return s, nil
}

var errItem = errors.New("want ROLE@DURATION, e.g. server@2s")

func parseItem(a Action, item string) (Planned, error) {
	if item == "" {
		return Planned{}, fmt.Errorf("empty item: %w", errItem)
	}
	role, at, ok := strings.Cut(item, "@")
	if !ok {
		return Planned{}, fmt.Errorf("no @: %w", errItem)
	}
	r := Role(strings.TrimSpace(role))
	switch r {
	case Coordinator, Server, Worker:
	default:
		return Planned{}, fmt.Errorf("unknown role %q (want coordinator, server or worker)", role)
	}
	at = strings.TrimSpace(at)
	d, err := time.ParseDuration(at)
	if err != nil {
		return Planned{}, fmt.Errorf("time %q is not a duration such as 2s or 1500ms", at)
	}
	if d < 0 {
		return Planned{}, fmt.Errorf("time %q is negative", at)
	}
	return Planned{Action: a, Role: r, At: d}, nil
}
