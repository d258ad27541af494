package main

import (
	"fmt"
	"os"

	"github.com/terrace-ml/terrace/internal/control/coord"
)

// onCopiesLostUsage is --on-copies-lost's help, the coordinator's and
// train's.
const onCopiesLostUsage = "when slots lose every copy (k servers killed at once): continue with them empty, resume, taking the live cluster back to the newest checkpoint in --checkpoint-dir, or auto: resume when --checkpoint-dir is given, else continue"

// onCopiesLostAuto is --on-copies-lost's default: resume where there is a
// checkpoint directory to go back to. In 802 simulated schedules that
// went back 179 times, none went back with every copy whole
// (docs/design/resilience.md, "Measured in the simulation"); going on
// instead finishes the model with the lost slots trained from the loss
// on, their acknowledged updates gone.
const onCopiesLostAuto = "auto"

// checkOnCopiesLost reads --on-copies-lost: resume needs a checkpoint
// directory to go back to, and auto resumes where there is one.
func checkOnCopiesLost(s, dir string) (coord.CopiesLostPolicy, error) {
	if s == onCopiesLostAuto {
		if dir == "" {
			return coord.OnCopiesLostContinue, nil
		}
		return coord.OnCopiesLostResume, nil
	}
	p, err := coord.ParseCopiesLostPolicy(s)
	if err != nil {
		return "", fmt.Errorf("--on-copies-lost %q: want auto, continue or resume", s)
	}
	if p == coord.OnCopiesLostResume && dir == "" {
		return "", fmt.Errorf("--on-copies-lost resume needs --checkpoint-dir: it goes back to the newest checkpoint there")
	}
	return p, nil
}

// defaultCheckpointKeep is how many cluster checkpoints a job keeps: the
// newest, and two to fall back on should it be damaged.
const defaultCheckpointKeep = 3

// checkCheckpointFlags refuses checkpoint flags that contradict each
// other or make no sense, naming the flag.
func checkCheckpointFlags(dir string, every, keep int, resume bool) error {
	switch {
	case every < 0:
		return fmt.Errorf("--checkpoint-every %d: give the passes between checkpoints, or 0 for none", every)
	case keep < 0:
		return fmt.Errorf("--checkpoint-keep %d: give how many checkpoints to keep, or 0 for every one", keep)
	case every > 0 && dir == "":
		return fmt.Errorf("--checkpoint-every needs --checkpoint-dir")
	case resume && dir == "":
		return fmt.Errorf("--resume needs --checkpoint-dir")
	case every > 0:
		return checkWritableDir(dir)
	}
	return nil
}

// checkWritableDir makes checkpoint directory dir if it is missing and
// checks that a file can be written in it: the coordinator writes its
// commit records there. A directory it could not make or write in
// abandoned every checkpoint, with a WARN line each, and the job ended
// without one, exit 0.
func checkWritableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--checkpoint-dir %s: checkpoints cannot be written there: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".terrace-write-check-*")
	if err != nil {
		return fmt.Errorf("--checkpoint-dir %s: checkpoints cannot be written there: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}
