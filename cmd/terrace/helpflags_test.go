package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestHelpNamesOwnFlags: a flag's help names only flags of its own
// command, but where it says whose ("terrace plan --measure", "train's
// --x"). terrace worker --help said --straggle "turns --audit on", a
// flag train has and worker does not.
func TestHelpNamesOwnFlags(t *testing.T) {
	flagRef := regexp.MustCompile(`(terrace [a-z]+(?: [a-z]+)? |[a-z]+'s )?--([a-z][a-z0-9-]*)`)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			for _, m := range flagRef.FindAllStringSubmatch(f.Usage, -1) {
				if strings.HasPrefix(m[1], "terrace ") || strings.HasSuffix(m[1], "'s ") {
					continue // another command's flag, named as such
				}
				if c.Flags().Lookup(m[2]) == nil && c.InheritedFlags().Lookup(m[2]) == nil {
					t.Errorf("terrace %s --%s: its help names --%s, which %s does not take: %q", c.Name(), f.Name, m[2], c.Name(), f.Usage)
				}
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, c := range []*cobra.Command{trainCmd(), coordinatorCmd(), serverCmd(), workerCmd(), benchCmd(), planCmd(), replayCmd(),
		submitCmd(), statusCmd(), eventsCmd(), plotCmd(), exportCmd(), predictCmd(), certsCmd(), tokensCmd(), checkpointCmd()} {
		walk(c)
	}
}
