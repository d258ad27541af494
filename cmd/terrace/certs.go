package main

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/terrace-ml/terrace/internal/control/auth"
	"github.com/terrace-ml/terrace/internal/security/pki"
)

func certsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make and list the cluster's TLS certificates: a CA, and node certificates it signs",
		Long: `A cluster CA signs one certificate per node; every connection between nodes
then uses mutual TLS (start each node with --tls-dir DIR/NAME). The CA key stays
in DIR: copy only a node's own directory to its machine. Certificates made
elsewhere (cert-manager, Vault) work too: pass --tls-ca, --tls-cert, --tls-key.`,
	}
	var dir string
	var days int
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Make a cluster CA in --dir (ca.crt, and ca.key readable by its owner only)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkDays(days); err != nil {
				return err
			}
			if err := pki.Init(dir, "", pki.Options{Validity: time.Duration(days) * 24 * time.Hour}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cluster CA written to %s; issue node certificates with `terrace certs issue --dir %s --name N --hosts H,...`\n", dir, dir)
			return nil
		},
	}
	initCmd.Flags().StringVar(&dir, "dir", "", "directory for the CA (required)")
	initCmd.Flags().IntVar(&days, "days", int(pki.DefaultCAValidity/(24*time.Hour)), "validity in days")
	initCmd.MarkFlagRequired("dir")

	var name, hosts string
	var nodeDays int
	issue := &cobra.Command{
		Use:   "issue",
		Short: "Make a node certificate signed by the CA in --dir, written to --dir/NAME/ (ca.crt, node.crt, node.key)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkDays(nodeDays); err != nil {
				return err
			}
			out, err := pki.Issue(dir, name, strings.Split(hosts, ","), pki.Options{Validity: time.Duration(nodeDays) * 24 * time.Hour})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "certificate for %s (%s) written to %s; start the node with --tls-dir %s\n", name, hosts, out, out)
			return nil
		},
	}
	issue.Flags().StringVar(&dir, "dir", "", "directory of the CA (required)")
	issue.Flags().StringVar(&name, "name", "", "node name (required)")
	issue.Flags().StringVar(&hosts, "hosts", "", "comma-separated DNS names and IP addresses peers reach the node by (required)")
	issue.Flags().IntVar(&nodeDays, "days", int(pki.DefaultNodeValidity/(24*time.Hour)), "validity in days")
	for _, f := range []string{"dir", "name", "hosts"} {
		issue.MarkFlagRequired(f)
	}

	list := &cobra.Command{
		Use:   "list",
		Short: "List the certificates under --dir with their hosts and expiry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			infos, err := pki.List(dir)
			if err != nil {
				return fmt.Errorf("--dir %s: %w", dir, err)
			}
			now := time.Now()
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PATH\tSUBJECT\tHOSTS\tEXPIRES\tSTATUS")
			for _, in := range infos {
				status := fmt.Sprintf("valid, %d days left", int(in.NotAfter.Sub(now).Hours()/24))
				if in.Expired(now) {
					status = "EXPIRED"
				}
				subj := in.Subject
				if in.IsCA {
					subj += " (CA)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", in.Path, subj, strings.Join(in.Hosts, ","), in.NotAfter.UTC().Format(time.RFC3339), status)
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&dir, "dir", ".", "directory to list")
	cmd.AddCommand(initCmd, issue, list)
	return cmd
}

// maxDays is the longest validity a time.Duration holds (about 292
// years); a longer --days wrapped around to a date nobody asked for.
const maxDays = int(math.MaxInt64 / int64(24*time.Hour))

func checkDays(days int) error {
	if days < 1 || days > maxDays {
		return fmt.Errorf("--days %d: want 1 to %d", days, maxDays)
	}
	return nil
}

func tokensCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Make the coordinator's join tokens, one per role (admin, server, worker, read)",
	}
	var out string
	newCmd := &cobra.Command{
		Use:   "new",
		Short: "Write a new tokens file (mode 0600) for the coordinator's --tokens; give each node only its role's token",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := auth.WriteNew(out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "tokens written to %s; start the coordinator with --tokens %s, and each node with --token-file or $%s\n", out, out, auth.EnvToken)
			return nil
		},
	}
	newCmd.Flags().StringVar(&out, "out", "", "file to write (required; never overwritten)")
	newCmd.MarkFlagRequired("out")
	cmd.AddCommand(newCmd)
	return cmd
}
