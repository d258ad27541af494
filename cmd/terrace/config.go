package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// addConfigFlag lets a command take its flags from a YAML file whose keys
// are flag names; flags given on the command line win.
func addConfigFlag(cmd *cobra.Command) {
	cmd.Flags().String("config", "", "YAML file of flag values (keys are flag names)")
	prev := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if err := applyConfig(cmd.Flags()); err != nil {
			return err
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}

func applyConfig(fs *pflag.FlagSet) error {
	path, _ := fs.GetString("config")
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	m, err := flagMap(b)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		f := fs.Lookup(k)
		if f == nil || k == "config" {
			return fmt.Errorf("config %s: unknown setting %q", path, k)
		}
		if f.Changed {
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return fmt.Errorf("config %s: %s: %w", path, k, err)
		}
	}
	return nil
}

// flagMap reads a YAML map of flag names to values, each value as a
// command line gives it: a key with no value ("test:") is "", where
// fmt.Sprint made it "<nil>" ("--test <nil>: stat <nil>").
func flagMap(b []byte) (map[string]string, error) {
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("want a YAML map of flag names to values, one \"name: value\" a line: %w", err)
		}
		return nil, err
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if v != nil {
			out[k] = fmt.Sprint(v)
		} else {
			out[k] = ""
		}
	}
	return out, nil
}
