package table

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalid is wrapped by every validation error of a Spec.
var ErrInvalid = errors.New("invalid table spec")

// RuleKind names a server-side update rule.
type RuleKind string

// The update rules a server applies to pushed values.
const (
	// Sum adds the pushed value to the stored one.
	Sum RuleKind = "sum"
	// SGD subtracts LR times the pushed gradient.
	SGD RuleKind = "sgd"
	// AdaGrad scales each coordinate's step by the root of its summed squared gradients.
	AdaGrad RuleKind = "adagrad"
	// Adam keeps bias-corrected first and second moments per coordinate.
	Adam RuleKind = "adam"
	// FTRL is FTRL-Proximal with L1 and L2 regularisation (McMahan et al., 2013).
	FTRL RuleKind = "ftrl"
)

// Rule is a table's update rule and its hyper-parameters. Fields that a
// rule does not use are ignored.
type Rule struct {
	Kind RuleKind `json:"kind" yaml:"kind"`
	// LR is the learning rate (alpha for FTRL).
	LR float32 `json:"lr,omitempty" yaml:"lr,omitempty"`
	// Beta1, Beta2 are Adam's moment decays; Beta is FTRL's beta.
	Beta1 float32 `json:"beta1,omitempty" yaml:"beta1,omitempty"`
	Beta2 float32 `json:"beta2,omitempty" yaml:"beta2,omitempty"`
	Beta  float32 `json:"beta,omitempty" yaml:"beta,omitempty"`
	// Eps guards divisions in AdaGrad and Adam.
	Eps float32 `json:"eps,omitempty" yaml:"eps,omitempty"`
	// L1, L2 are FTRL's regularisation strengths, and L2 weight decay for
	// SGD and AdaGrad.
	L1 float32 `json:"l1,omitempty" yaml:"l1,omitempty"`
	L2 float32 `json:"l2,omitempty" yaml:"l2,omitempty"`
}

// StateSlots is the number of float32 values of optimizer state the rule
// keeps per stored value (0 for sum and SGD).
func (r Rule) StateSlots() int {
	switch r.Kind {
	case AdaGrad:
		return 1
	case Adam:
		return 3 // first moment, second moment, and the value's own step count
	case FTRL:
		return 2 // z and n
	}
	return 0
}

// Model is a consistency model.
type Model string

// The consistency models.
const (
	// BSP is bulk-synchronous: a read at clock c sees every update of clocks < c and nothing else.
	BSP Model = "bsp"
	// SSP is stale-synchronous with bound Staleness (the PS paper's bounded delay tau).
	SSP Model = "ssp"
	// ASP is asynchronous: reads never wait.
	ASP Model = "asp"
)

// Consistency is a table's consistency model.
type Consistency struct {
	Model     Model `json:"model" yaml:"model"`
	Staleness int   `json:"staleness,omitempty" yaml:"staleness,omitempty"`
}

// ParseConsistency parses "bsp", "asp" or "ssp:S".
func ParseConsistency(s string) (Consistency, error) {
	switch {
	case s == "bsp":
		return Consistency{Model: BSP}, nil
	case s == "asp":
		return Consistency{Model: ASP}, nil
	case strings.HasPrefix(s, "ssp:"):
		n, err := strconv.Atoi(s[4:])
		if err != nil || n < 0 {
			return Consistency{}, fmt.Errorf("%w: consistency %q: staleness must be a non-negative integer", ErrInvalid, s)
		}
		return Consistency{Model: SSP, Staleness: n}, nil
	}
	return Consistency{}, fmt.Errorf("%w: consistency %q: want bsp, asp or ssp:S", ErrInvalid, s)
}

func (c Consistency) String() string {
	if c.Model == SSP {
		return fmt.Sprintf("ssp:%d", c.Staleness)
	}
	return string(c.Model)
}

// Bound returns how many clocks behind a reader the slowest worker may be:
// 0 for BSP, Staleness for SSP, and -1 (no bound) for ASP.
func (c Consistency) Bound() int {
	switch c.Model {
	case BSP:
		return 0
	case SSP:
		return c.Staleness
	}
	return -1
}

// InitKind names how a value is created on first touch.
type InitKind string

// The initialisers.
const (
	Zero    InitKind = "zero"
	Uniform InitKind = "uniform" // uniform in [-Scale, Scale)
	Normal  InitKind = "normal"  // normal with standard deviation Scale
)

// Init says how a missing key's value is created on first touch. Random
// initialisers are seeded by (Seed, key), so every server and every run
// creates the same value for the same key.
type Init struct {
	Kind  InitKind `json:"kind" yaml:"kind"`
	Scale float32  `json:"scale,omitempty" yaml:"scale,omitempty"`
	Seed  uint64   `json:"seed,omitempty" yaml:"seed,omitempty"`
}

// Encoding is how a worker encodes the values of a push on the wire.
type Encoding string

// The push encodings.
const (
	// Raw sends every float32 as is.
	Raw Encoding = "raw"
	// Sparse sends (index, value) pairs of the non-zero entries; lossless.
	Sparse Encoding = "sparse"
	// FP16 sends IEEE half floats; lossy, opt-in.
	FP16 Encoding = "fp16"
	// Int8 sends int8 values with a per-message scale; lossy, opt-in.
	Int8 Encoding = "int8"
)

// Spec describes one table.
type Spec struct {
	Name        string      `json:"name" yaml:"name"`
	Width       int         `json:"width" yaml:"width"`
	Rule        Rule        `json:"rule" yaml:"rule"`
	Init        Init        `json:"init" yaml:"init"`
	Consistency Consistency `json:"consistency" yaml:"consistency"`
	// Encoding of pushes; Raw when empty. Sparse is chosen per message only
	// when it is smaller than Raw.
	Encoding Encoding `json:"encoding,omitempty" yaml:"encoding,omitempty"`
	// Significance, when positive, turns on the significantly-modified
	// filter: an entry is pushed only once the magnitude of its accumulated,
	// not yet pushed change exceeds Significance; the rest stays accumulated
	// on the worker.
	Significance float32 `json:"significance,omitempty" yaml:"significance,omitempty"`
}

// MaxWidth bounds a table's value width.
const MaxWidth = 1 << 16

// Validate checks s and fills defaults (zero init, raw encoding, ASP, and
// each rule's usual hyper-parameters where unset).
func (s *Spec) Validate() error {
	if s.Name == "" || len(s.Name) > 255 {
		return fmt.Errorf("%w: name must have 1 to 255 bytes", ErrInvalid)
	}
	if s.Width < 1 || s.Width > MaxWidth {
		return fmt.Errorf("%w: table %q: width %d not in [1,%d]", ErrInvalid, s.Name, s.Width, MaxWidth)
	}
	r := &s.Rule
	switch r.Kind {
	case "":
		r.Kind = Sum
	case Sum:
	case SGD:
		def(&r.LR, 0.01)
	case AdaGrad:
		def(&r.LR, 0.1)
		def(&r.Eps, 1e-8)
	case Adam:
		def(&r.LR, 0.001)
		def(&r.Beta1, 0.9)
		def(&r.Beta2, 0.999)
		def(&r.Eps, 1e-8)
	case FTRL:
		def(&r.LR, 0.1)
		def(&r.Beta, 1)
	default:
		return fmt.Errorf("%w: table %q: unknown rule %q", ErrInvalid, s.Name, r.Kind)
	}
	if r.LR < 0 || r.L1 < 0 || r.L2 < 0 || r.Eps < 0 || r.Beta < 0 || r.Beta1 < 0 || r.Beta1 >= 1 || r.Beta2 < 0 || r.Beta2 >= 1 {
		return fmt.Errorf("%w: table %q: rule hyper-parameters out of range", ErrInvalid, s.Name)
	}
	switch s.Init.Kind {
	case "":
		s.Init.Kind = Zero
	case Zero, Uniform, Normal:
	default:
		return fmt.Errorf("%w: table %q: unknown init %q", ErrInvalid, s.Name, s.Init.Kind)
	}
	switch s.Consistency.Model {
	case "":
		s.Consistency.Model = ASP
	case BSP, ASP:
		s.Consistency.Staleness = 0
	case SSP:
		if s.Consistency.Staleness < 0 {
			return fmt.Errorf("%w: table %q: negative staleness", ErrInvalid, s.Name)
		}
	default:
		return fmt.Errorf("%w: table %q: unknown consistency %q", ErrInvalid, s.Name, s.Consistency.Model)
	}
	switch s.Encoding {
	case "":
		s.Encoding = Raw
	case Raw, Sparse, FP16, Int8:
	default:
		return fmt.Errorf("%w: table %q: unknown encoding %q", ErrInvalid, s.Name, s.Encoding)
	}
	if s.Significance < 0 {
		return fmt.Errorf("%w: table %q: negative significance threshold", ErrInvalid, s.Name)
	}
	return nil
}

func def(p *float32, v float32) {
	if *p == 0 {
		*p = v
	}
}
