package data

import (
	"os"
	"path/filepath"
)

// SharedPath is a helper for tests and benchmarks. It returns the path of
// ../shared/data/<rel>, taken relative to the module root (the nearest
// directory above the working directory that holds go.mod), and whether
// that file exists. Data that the project may not redistribute, such as
// MovieLens, lives there on development machines and CI but not in a
// user's clone, so callers skip when ok is false.
func SharedPath(rel string) (path string, ok bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
	path = filepath.Join(dir, "..", "shared", "data", filepath.FromSlash(rel))
	if _, err := os.Stat(path); err != nil {
		return "", false
	}
	return path, true
}
