package tier

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Class is the reliability class of a machine. Every node runs on one
// machine, and roles on one machine share its network link.
type Class uint8

const (
	// Reliable machines (on-demand) are assumed to stay: they hold the
	// authoritative state and run the coordinator.
	Reliable Class = iota
	// Transient machines (spot, preemptible) can be revoked at any moment,
	// in bulk and without notice.
	Transient
)

// Classes lists every class, in order.
var Classes = [...]Class{Reliable, Transient}

// ErrUnknownClass is returned for a class name that is neither reliable
// nor transient.
var ErrUnknownClass = errors.New("unknown class (want reliable or transient)")

func (c Class) String() string {
	switch c {
	case Reliable:
		return "reliable"
	case Transient:
		return "transient"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// ParseClass reads "reliable" or "transient".
func ParseClass(s string) (Class, error) {
	switch strings.TrimSpace(s) {
	case "reliable":
		return Reliable, nil
	case "transient":
		return Transient, nil
	}
	return 0, fmt.Errorf("%q: %w", s, ErrUnknownClass)
}

// MarshalText writes the class's name, so that JSON carries words.
func (c Class) MarshalText() ([]byte, error) {
	if c > Transient {
		return nil, fmt.Errorf("tier: %w: %d", ErrUnknownClass, uint8(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText reads the class's name.
func (c *Class) UnmarshalText(b []byte) error {
	v, err := ParseClass(string(b))
	if err != nil {
		return fmt.Errorf("tier: %w", err)
	}
	*c = v
	return nil
}

// Stage is how the cluster places its roles on the two classes (TierML's
// stages): see the constants.
type Stage uint8

const (
	// Stage1 runs parameter servers on reliable machines only; workers
	// run on every machine.
	Stage1 Stage = 1
	// Stage2 runs ActivePS on transient machines in front of BackupPS on
	// reliable ones; workers run on every machine.
	Stage2 Stage = 2
	// Stage3 is stage 2 with no worker on reliable machines: they run
	// BackupPS only.
	Stage3 Stage = 3
)

// Stages lists every stage, in order.
var Stages = [...]Stage{Stage1, Stage2, Stage3}

// ErrUnknownStage is returned for a stage other than 1, 2 and 3.
var ErrUnknownStage = errors.New("unknown stage (want 1, 2 or 3)")

func (s Stage) String() string { return strconv.Itoa(int(s)) }

// Valid says whether s is one of the three stages.
func (s Stage) Valid() bool { return s >= Stage1 && s <= Stage3 }

// ParseStage reads "1", "2" or "3".
func ParseStage(str string) (Stage, error) {
	n, err := strconv.Atoi(strings.TrimSpace(str))
	if err != nil || n < int(Stage1) || n > int(Stage3) {
		return 0, fmt.Errorf("%q: %w", str, ErrUnknownStage)
	}
	return Stage(n), nil
}

// Formable says whether a cluster of reliable and transient machines can
// run stage s, and if not, why. Every stage needs a reliable machine (the
// coordinator and the authoritative copy live there); stages 2 and 3 need
// a transient one to run an ActivePS.
func (s Stage) Formable(reliable, transient int) error {
	switch {
	case !s.Valid():
		return fmt.Errorf("stage %d: %w", s, ErrUnknownStage)
	case reliable < 1:
		return fmt.Errorf("stage %d needs at least one reliable machine, have %d", s, reliable)
	case s > Stage1 && transient < 1:
		return fmt.Errorf("stage %d needs at least one transient machine to run an ActivePS, have %d", s, transient)
	}
	return nil
}

// ByClass holds one figure per class.
type ByClass struct {
	Reliable  float64 `json:"reliable"`
	Transient float64 `json:"transient"`
}

// Of returns c's figure.
func (b ByClass) Of(c Class) float64 {
	if c == Transient {
		return b.Transient
	}
	return b.Reliable
}

// Set sets c's figure.
func (b *ByClass) Set(c Class, v float64) {
	if c == Transient {
		b.Transient = v
	} else {
		b.Reliable = v
	}
}

// ParseByClass reads a list such as "reliable=100,transient=1000" into a
// copy of def: classes the list does not name keep def's figure. flag names
// the flag in errors. Every value must be a finite number >= 0; a class
// named twice is an error.
func ParseByClass(flag, s string, def ByClass) (ByClass, error) {
	out := def
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	var seen [len(Classes)]bool
	for i, item := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(item, "=")
		if !ok {
			return def, fmt.Errorf("%s item %d %q: want CLASS=VALUE, e.g. reliable=100", flag, i+1, item)
		}
		c, err := ParseClass(name)
		if err != nil {
			return def, fmt.Errorf("%s item %d: %w", flag, i+1, err)
		}
		if seen[c] {
			return def, fmt.Errorf("%s item %d: class %s given twice", flag, i+1, c)
		}
		seen[c] = true
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return def, fmt.Errorf("%s item %d %q: want a finite number >= 0", flag, i+1, item)
		}
		out.Set(c, v)
	}
	return out, nil
}

// String writes b as ParseByClass reads it.
func (b ByClass) String() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return "reliable=" + f(b.Reliable) + ",transient=" + f(b.Transient)
}
