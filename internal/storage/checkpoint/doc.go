// Package checkpoint writes a Terrace cluster's tables and training progress durably into a directory, and finds the newest complete checkpoint to resume from (docs/format/checkpoint.md).
package checkpoint
