// Package release reads what a tag of one revision of this repository
// publishes — every module of go.work but tools, at one version — and
// writes it as a module proxy directory, the layout `go help goproxy`
// describes, with zips made as the module proxy makes them from a tag.
package release

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

const (
	// RepoPath is the repository's import path: the module in directory
	// <dir> is RepoPath/<dir>, so the tag <dir>/vX.Y.Z publishes it.
	RepoPath = "github.com/tenaz/tenaz"
	// ToolsModule is the repository's own tooling, never released.
	ToolsModule = RepoPath + "/tools"
)

// Release is what a tag of one revision publishes.
type Release struct {
	Commit  string    // the revision's full hash
	Time    time.Time // its commit time, the versions' .info Time
	Version string    // vX.Y.Z, every module's
	Modules []Module
}

// Module is one released module at the revision.
type Module struct {
	Path  string // RepoPath/<dir>
	Dir   string // slash-separated, relative to the repository root
	GoMod []byte // its go.mod, served as <version>.mod
}

// Root is the top of the git work tree that holds dir.
func Root(ctx context.Context, dir string) (string, error) {
	return gitOutput(ctx, dir, "rev-parse", "--show-toplevel")
}

// Read reads go.work and every module's go.mod at rev in the repository at
// root, and checks that they make one release: each module's path is
// RepoPath/<dir>, and each require of a sibling names the same version
// (want, when given).
func Read(ctx context.Context, root, rev, want string) (*Release, error) {
	commit, err := gitOutput(ctx, root, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return nil, err
	}
	when, err := gitOutput(ctx, root, "show", "-s", "--format=%cI", commit)
	if err != nil {
		return nil, err
	}
	t, err := time.Parse(time.RFC3339, when)
	if err != nil {
		return nil, fmt.Errorf("commit time %q: %w", when, err)
	}
	work, err := gitShow(ctx, root, commit, "go.work")
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", work, nil)
	if err != nil {
		return nil, err
	}

	rel := &Release{Commit: commit, Time: t.UTC()}
	files := map[string]*modfile.File{}
	var problems []string
	for _, u := range wf.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		data, err := gitShow(ctx, root, commit, dir+"/go.mod")
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(dir+"/go.mod", data, nil)
		if err != nil {
			return nil, err
		}
		if f.Module == nil {
			return nil, fmt.Errorf("%s/go.mod at %s has no module line", dir, rev)
		}
		if f.Module.Mod.Path == ToolsModule {
			continue
		}
		if want := RepoPath + "/" + dir; f.Module.Mod.Path != want {
			problems = append(problems, fmt.Sprintf("%s/go.mod: module %s, want %s (the path a tag %s/vX.Y.Z publishes)",
				dir, f.Module.Mod.Path, want, dir))
		}
		rel.Modules = append(rel.Modules, Module{Path: f.Module.Mod.Path, Dir: dir, GoMod: data})
		files[f.Module.Mod.Path] = f
	}

	// The version is the one the siblings' requires name.
	versions := map[string][]string{} // version → "dir: requires path"
	for _, m := range rel.Modules {
		for _, r := range files[m.Path].Require {
			if files[r.Mod.Path] != nil {
				versions[r.Mod.Version] = append(versions[r.Mod.Version], m.Dir+"/go.mod requires "+r.Mod.String())
			}
		}
	}
	rel.Version = want
	if want == "" && len(versions) == 1 {
		for v := range versions {
			rel.Version = v
		}
	}
	switch {
	case rel.Version != "":
		for v, uses := range versions {
			if v != rel.Version {
				for _, u := range uses {
					problems = append(problems, u+", want "+rel.Version)
				}
			}
		}
		for _, m := range rel.Modules {
			if err := module.Check(m.Path, rel.Version); err != nil {
				problems = append(problems, err.Error())
			}
		}
		if rel.Version == "v0.0.0" {
			problems = append(problems, "v0.0.0 is no release: set one with releasecheck -set vX.Y.Z")
		}
	case len(versions) == 0:
		problems = append(problems, "no module requires a sibling: name the version with -version")
	default:
		problems = append(problems, fmt.Sprintf("the modules require their siblings at %d versions, want one (or name it with -version):", len(versions)))
		problems = append(problems, slices.Sorted(flatten(versions))...)
	}
	if len(problems) > 0 {
		return nil, errors.New("not a release:\n  " + strings.Join(problems, "\n  "))
	}
	return rel, nil
}

func flatten(m map[string][]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, l := range m {
			for _, s := range l {
				if !yield(s) {
					return
				}
			}
		}
	}
}

// WriteProxy writes rel's modules into the directory proxy, a GOPROXY of
// the file:// kind. The zips are made from the commit in the repository
// at root, as the module proxy would make them from a tag.
func (rel *Release) WriteProxy(root, proxy string) error {
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{rel.Version, rel.Time})
	if err != nil {
		return err
	}
	for _, m := range rel.Modules {
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		dir := filepath.Join(proxy, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for name, data := range map[string][]byte{
			"list":                []byte(rel.Version + "\n"),
			rel.Version + ".info": info,
			rel.Version + ".mod":  m.GoMod,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return err
			}
		}
		zf, err := os.Create(filepath.Join(dir, rel.Version+".zip"))
		if err != nil {
			return err
		}
		err = modzip.CreateFromVCS(zf, module.Version{Path: m.Path, Version: rel.Version}, root, rel.Commit, m.Dir)
		if cerr := zf.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
	}
	return nil
}

// SetVersion makes every module of the working tree's go.work require its
// siblings at version, with go mod edit (only those lines change), and
// returns the go.mod files it changed.
func SetVersion(ctx context.Context, root, version string) ([]string, error) {
	if err := module.Check(RepoPath+"/pkg", version); err != nil {
		return nil, err
	}
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", work, nil)
	if err != nil {
		return nil, err
	}
	siblings := map[string]bool{}
	var gomods, changed []string
	for _, u := range wf.Use {
		name := filepath.Join(root, filepath.FromSlash(u.Path), "go.mod")
		f, err := readMod(name)
		if err != nil {
			return nil, err
		}
		if f.Module == nil {
			return nil, fmt.Errorf("%s has no module line", name)
		}
		if f.Module.Mod.Path != ToolsModule {
			siblings[f.Module.Mod.Path] = true
			gomods = append(gomods, name)
		}
	}
	for _, name := range gomods {
		f, err := readMod(name)
		if err != nil {
			return nil, err
		}
		args := []string{"mod", "edit"}
		for _, r := range f.Require {
			if siblings[r.Mod.Path] && r.Mod.Version != version {
				args = append(args, "-require="+r.Mod.Path+"@"+version)
			}
		}
		if len(args) == 2 {
			continue
		}
		cmd := exec.CommandContext(ctx, "go", append(args, name)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		changed = append(changed, name)
	}
	return changed, nil
}

func gitShow(ctx context.Context, root, commit, name string) ([]byte, error) {
	return gitRaw(ctx, root, "show", commit+":"+name)
}

func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := gitRaw(ctx, dir, args...)
	return strings.TrimSpace(string(out)), err
}

func gitRaw(ctx context.Context, dir string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// readMod reads and parses the go.mod file name.
func readMod(name string) (*modfile.File, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(name, data, nil)
}
