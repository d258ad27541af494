package main

import "fmt"

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
	}
	return nil
}
