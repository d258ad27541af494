package internal_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/terrace-ml/terrace/"

// layer is one row of docs/ARCHITECTURE.md's package table: the packages
// (directories relative to the module root, a trailing "/" covering every
// package under it) and the layers they may import. Imports within a
// layer are allowed; Go rules out cycles.
type layer struct {
	name string
	pkgs []string
	uses []string
}

var layers = []layer{
	{"model", []string{"keyspace", "table", "data", "metrics", "internal", "internal/dataplane/wire", "internal/placement/", "internal/planner", "internal/plotfile", "internal/modelfile", "internal/crc32c", "internal/market", "internal/market/"}, nil},
	{"network and storage", []string{"internal/dataplane/transport", "internal/dataplane/simnet", "internal/dataplane/link", "internal/storage/", "internal/security/"}, []string{"model"}},
	{"control contract", []string{"internal/control/api"}, []string{"model"}},
	{"nodes", []string{"internal/server", "internal/control/", "internal/process/evict"}, []string{"model", "network and storage", "control contract"}},
	{"client", []string{"ps"}, []string{"model", "network and storage", "control contract"}},
	{"apps", []string{"apps/"}, []string{"model", "client"}},
	{"processes", []string{"internal/process/node", "internal/process/peernet"}, []string{"model", "network and storage", "control contract", "nodes", "client"}},
	{"harness", []string{"internal/harness/"}, []string{"model", "network and storage", "control contract", "nodes", "client", "apps", "processes"}},
	{"command", []string{"cmd/"}, []string{"model", "network and storage", "control contract", "nodes", "client", "apps", "processes", "harness"}},
}

// layerOf names the layer of the package in dir, the longest match winning
// (so that "internal/control/api" is not taken for "internal/control/").
func layerOf(dir string) (string, bool) {
	best, name := -1, ""
	for _, l := range layers {
		for _, p := range l.pkgs {
			match := dir == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(dir, p))
			if match && len(p) > best {
				best, name = len(p), l.name
			}
		}
	}
	return name, best >= 0
}

// pending lists imports that break the table and are being removed (issue
// 10: ps is to depend on the control contract only). The test fails once
// one of them is gone, so that this list only shrinks.
var pending = map[string]bool{}

func uses(from, to string) bool {
	if from == to {
		return true
	}
	for _, l := range layers {
		if l.name == from {
			return slices.Contains(l.uses, to)
		}
	}
	return false
}

// TestImportsPointDown parses every non-test file of the module and fails
// on any import of a module package that its layer may not use, and on any
// package the table does not place.
func TestImportsPointDown(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]map[string]bool{} // dir -> imported dirs
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		if imports[rel] == nil {
			imports[rel] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, module) {
				imports[rel][strings.TrimPrefix(p, module)] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 10 {
		t.Fatalf("found only %d packages under %s", len(imports), root)
	}
	dirs := make([]string, 0, len(imports))
	for d := range imports {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	seen := map[string]bool{}
	for _, dir := range dirs {
		from, ok := layerOf(dir)
		if !ok {
			t.Errorf("package %s is in no layer: add it to the table here and in docs/ARCHITECTURE.md", dir)
			continue
		}
		for imp := range imports[dir] {
			to, ok := layerOf(imp)
			if !ok {
				continue // reported as a package of its own
			}
			if edge := dir + " -> " + imp; pending[edge] {
				seen[edge] = true
				continue
			}
			if !uses(from, to) {
				t.Errorf("%s (%s) imports %s (%s): imports must point down the layer table", dir, from, imp, to)
			}
		}
	}
	for edge := range pending {
		if !seen[edge] {
			t.Errorf("pending import %s is gone: remove it from the list", edge)
		}
	}
}

// TestLayerTableIsDocumented keeps the table here and the one in
// docs/ARCHITECTURE.md naming the same layers.
func TestLayerTableIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		if !strings.Contains(string(doc), "| "+l.name+" |") {
			t.Errorf("docs/ARCHITECTURE.md's package table has no row %q", l.name)
		}
	}
}
