package drill

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
	// Class-wide targets (issue 11): every node of the chosen machines of
	// a class, servers and workers alike.
	Reliable  Role = "reliable"
	Transient Role = "transient"
)

// AllMachines as a Planned's Count hits every machine of the class.
const AllMachines = -1

// Action is what a fault does to a node.
type Action string

// The actions.
const (
	// Kill sends SIGKILL to the node's process group: no goodbye.
	Kill Action = "kill"
	// Evict gives the node notice that its machine is going: a POST to
	// its eviction endpoint if it announced one, SIGTERM otherwise.
	Evict Action = "evict"
	// Add starts Count new machines of a class (Role), each a server and
	// the drill's workers per machine.
	Add Action = "add"
)

// Planned is one fault of a schedule: Action on a node of Role, At after
// training starts.
type Planned struct {
	Action Action
	Role   Role
	At     time.Duration
	// Count, for a class target, is how many machines: AllMachines, or N.
	// 0 for a role target (one random node).
	Count int
}

func (p Planned) String() string {
	switch p.Count {
	case 0:
		return fmt.Sprintf("%s %s@%s", p.Action, p.Role, p.At)
	case AllMachines:
		return fmt.Sprintf("%s %s@all@%s", p.Action, p.Role, p.At)
	}
	return fmt.Sprintf("%s %s@%d@%s", p.Action, p.Role, p.Count, p.At)
}

// IsClass reports whether r names a class of machines.
func (r Role) IsClass() bool { return r == Reliable || r == Transient }

// Schedule is a list of faults in the order they happen.
type Schedule []Planned

// ParseSchedule parses the --kill and --evict specs, each a comma-separated
// list of ROLE@DURATION items ("server@2s,worker@4.5s"; DURATION as Go's
// time.ParseDuration reads it, measured from the start of training), and
// returns their faults ordered by time; at equal times kills come first,
// then items in the order given. An empty spec has no faults. An item may
// also hit a class of machines, CLASS@all@DURATION or CLASS@N@DURATION
// (every node of all, or of N random, reliable or transient machines); add,
// if given, is the --add spec, CLASS@N@DURATION items that start N new
// machines of a class.
func ParseSchedule(kill, evict string, add ...string) (Schedule, error) {
	var s Schedule
	type spec struct {
		flag   string
		action Action
		spec   string
	}
	specs := []spec{{"--kill", Kill, kill}, {"--evict", Evict, evict}}
	for _, a := range add {
		specs = append(specs, spec{"--add", Add, a})
	}
	for _, in := range specs {
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

// Sorted returns s ordered by time, stably.
func (s Schedule) Sorted() Schedule {
	slices.SortStableFunc(s, func(a, b Planned) int { return cmp.Compare(a.At, b.At) })
	return s
}

var errItem = errors.New("want ROLE@DURATION or CLASS@all|N@DURATION, e.g. server@2s or transient@all@3s")

func parseItem(a Action, item string) (Planned, error) {
	if item == "" {
		return Planned{}, fmt.Errorf("empty item: %w", errItem)
	}
	parts := strings.Split(item, "@")
	if len(parts) < 2 || len(parts) > 3 {
		return Planned{}, fmt.Errorf("want one or two @: %w", errItem)
	}
	role, at := parts[0], parts[len(parts)-1]
	r := Role(strings.TrimSpace(role))
	count := 0
	switch {
	case len(parts) == 3:
		if !r.IsClass() {
			return Planned{}, fmt.Errorf("unknown class %q (want reliable or transient)", role)
		}
		n := strings.TrimSpace(parts[1])
		if n == "all" && a != Add {
			count = AllMachines
		} else if v, err := strconv.Atoi(n); err == nil && v >= 1 {
			count = v
		} else {
			return Planned{}, fmt.Errorf("machine count %q: want all or a number >= 1 (--add: a number)", n)
		}
	case a == Add:
		return Planned{}, fmt.Errorf("--add wants CLASS@N@DURATION, e.g. transient@2@5s")
	case r == Coordinator || r == Server || r == Worker:
	case r.IsClass():
		count = AllMachines
	default:
		return Planned{}, fmt.Errorf("unknown role %q (want coordinator, server, worker, reliable or transient)", role)
	}
	at = strings.TrimSpace(at)
	d, err := time.ParseDuration(at)
	if err != nil {
		return Planned{}, fmt.Errorf("time %q is not a duration such as 2s or 1500ms", at)
	}
	if d < 0 {
		return Planned{}, fmt.Errorf("time %q is negative", at)
	}
	return Planned{Action: a, Role: r, At: d, Count: count}, nil
}
