package main

import (
	"fmt"
	"os"

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
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	for k, v := range m {
		f := fs.Lookup(k)
		if f == nil || k == "config" {
			return fmt.Errorf("config %s: unknown setting %q", path, k)
		}
		if f.Changed {
			continue
		}
		if err := fs.Set(k, fmt.Sprint(v)); err != nil {
			return fmt.Errorf("config %s: %s: %w", path, k, err)
		}
	}
	return nil
}
