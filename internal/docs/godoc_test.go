package docs

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// libraryDirs returns the directories of the packages users import: every
// package of the repository but commands, internal packages, tests and
// examples (each module's).
func libraryDirs(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "internal" || d.Name() == "cmd" || d.Name() == "web":
			return filepath.SkipDir
		case rel == "examples" || rel == "integration" || rel == "deploy" || rel == "docs" || strings.HasSuffix(rel, "/model"):
			return filepath.SkipDir
		}
		files, _ := filepath.Glob(filepath.Join(p, "*.go"))
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				out = append(out, p)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// go doc reads as a reference: every exported name of every package users
// import (its types, functions, methods, constants, variables, and the
// fields of its exported structs) has a doc comment, and every package
// has a package comment.
func TestEveryExportedNameIsDocumented(t *testing.T) {
	dirs := libraryDirs(t)
	if len(dirs) < 10 {
		t.Fatalf("only %d packages found: %v", len(dirs), dirs)
	}
	for _, dir := range dirs {
		rel, _ := filepath.Rel(root, dir)
		fset := token.NewFileSet()
		names, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		pkgs := map[string][]*ast.File{} // by package name
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			pkgs[f.Name.Name] = append(pkgs[f.Name.Name], f)
		}
		for name, files := range pkgs {
			if name == "main" {
				continue
			}
			p, err := doc.NewFromFiles(fset, files, "github.com/nandi-go/nandi/"+rel)
			if err != nil {
				t.Fatal(err)
			}
			missing := func(what string) { t.Errorf("%s: %s has no doc comment", rel, what) }
			if strings.TrimSpace(p.Doc) == "" {
				missing("the package")
			}
			for _, v := range append(append([]*doc.Value{}, p.Consts...), p.Vars...) {
				if strings.TrimSpace(v.Doc) == "" && !everySpecDocumented(v.Decl) {
					missing(strings.Join(v.Names, ", "))
				}
			}
			for _, f := range p.Funcs {
				if strings.TrimSpace(f.Doc) == "" {
					missing(f.Name)
				}
			}
			for _, ty := range p.Types {
				if strings.TrimSpace(ty.Doc) == "" {
					missing(ty.Name)
				}
				checkFields(t, fset, rel, ty)
				for _, v := range append(append([]*doc.Value{}, ty.Consts...), ty.Vars...) {
					if strings.TrimSpace(v.Doc) == "" && !everySpecDocumented(v.Decl) {
						missing(strings.Join(v.Names, ", "))
					}
				}
				for _, f := range append(append([]*doc.Func{}, ty.Funcs...), ty.Methods...) {
					if strings.TrimSpace(f.Doc) == "" {
						missing(ty.Name + "." + f.Name)
					}
				}
			}
		}
	}
}

// everySpecDocumented reports whether each exported name of a const or var
// group has a comment of its own (a doc or a line comment).
func everySpecDocumented(d *ast.GenDecl) bool {
	for _, s := range d.Specs {
		vs := s.(*ast.ValueSpec)
		exported := false
		for _, n := range vs.Names {
			exported = exported || n.IsExported()
		}
		if exported && vs.Doc == nil && vs.Comment == nil {
			return false
		}
	}
	return true
}

// checkFields reports the exported fields of an exported struct that are
// documented nowhere: not above them or on their line, not by a comment
// above the run of fields (no blank line between) they belong to, and not
// by name in the type's doc comment.
func checkFields(t *testing.T, fset *token.FileSet, rel string, ty *doc.Type) {
	t.Helper()
	for _, s := range ty.Decl.Specs {
		ts, ok := s.(*ast.TypeSpec)
		if !ok {
			continue
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		documented := false // the run of fields since the last blank line has a comment
		prevEnd := token.NoPos
		for _, f := range st.Fields.List {
			if f.Doc != nil {
				documented = true
			} else if prevEnd.IsValid() && fset.Position(f.Pos()).Line-fset.Position(prevEnd).Line > 1 {
				documented = false
			}
			prevEnd = f.End()
			if f.Comment != nil || f.Doc != nil || documented {
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() && !strings.Contains(ty.Doc, n.Name) {
					t.Errorf("%s: field %s.%s has no comment", rel, ts.Name.Name, n.Name)
				}
			}
		}
	}
}

// Every public package has a runnable Example (the README says so of the
// transports): a func Example... with an Output comment, so that go test
// runs it. Two are excepted, for the reason given.
func TestEveryPackageHasARunnableExample(t *testing.T) {
	excepted := map[string]string{
		"sink/pgsink":             "its Example needs a PostgreSQL, which an Example cannot start (it is compiled only; the package's tests start servers of their own)",
		"transport/transporttest": "a conformance suite, run by every transport's tests",
	}
	var missing []string
	n := 0
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		base := filepath.Base(path)
		if strings.HasPrefix(base, ".") || base == "testdata" || base == "web" || base == "node_modules" ||
			strings.HasPrefix(rel, "internal") || strings.Contains(rel, "/internal") || strings.HasPrefix(rel, "examples") ||
			strings.HasPrefix(rel, "integration") || strings.HasPrefix(rel, "deploy") || strings.HasPrefix(rel, "cmd") || strings.HasSuffix(rel, "/model") {
			if rel != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "node_modules") {
				return filepath.SkipDir
			}
			if rel != "." {
				return nil
			}
		}
		files, _ := filepath.Glob(filepath.Join(path, "*.go"))
		src := false
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				src = true
			}
		}
		if !src || rel == "." {
			return nil
		}
		n++
		tests, _ := filepath.Glob(filepath.Join(path, "*_test.go"))
		found := false
		for _, f := range tests {
			b, _ := os.ReadFile(f)
			if regexp.MustCompile(`(?m)^func Example\w*\(\) \{`).Match(b) && strings.Contains(string(b), "// Output:") {
				found = true
			}
		}
		if !found {
			missing = append(missing, rel)
		}
		return nil
	})
	if n < 10 {
		t.Fatalf("%d packages found; want the repository's", n)
	}
	for _, m := range missing {
		if why, ok := excepted[m]; ok {
			t.Logf("%s has no runnable Example: %s", m, why)
			continue
		}
		t.Errorf("package %s has no runnable Example (func Example with an // Output: comment)", m)
	}
}
