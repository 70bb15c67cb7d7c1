package main

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
	// repoPath is the repository's import path: a module in directory
	// <dir> is repoPath/<dir>, so a tag <dir>/vX.Y.Z publishes it.
	repoPath = "github.com/tenaz/tenaz"
	// toolsModule is this module: the repository's own tooling, not
	// released.
	toolsModule = repoPath + "/tools"
)

// release is what a tag of one revision publishes.
type release struct {
	commit  string    // the revision's full hash
	time    time.Time // its commit time, the versions' .info Time
	version string    // vX.Y.Z, every module's
	modules []mod
}

// mod is one released module at the revision.
type mod struct {
	path  string // github.com/tenaz/tenaz/<dir>
	dir   string // slash-separated, relative to the repository root
	gomod []byte // its go.mod, served as <version>.mod
}

// readRelease reads go.work and every module's go.mod at rev, and checks
// that they make one release: each module's path is repoPath/<dir>, and
// each require of a sibling names the same version (want, when given).
func readRelease(ctx context.Context, root, rev, want string) (*release, error) {
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

	rel := &release{commit: commit, time: t.UTC()}
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
		if f.Module.Mod.Path == toolsModule {
			continue
		}
		if want := repoPath + "/" + dir; f.Module.Mod.Path != want {
			problems = append(problems, fmt.Sprintf("%s/go.mod: module %s, want %s (the path a tag %s/vX.Y.Z publishes)",
				dir, f.Module.Mod.Path, want, dir))
		}
		rel.modules = append(rel.modules, mod{path: f.Module.Mod.Path, dir: dir, gomod: data})
		files[f.Module.Mod.Path] = f
	}

	// The version is the one the siblings' requires name.
	versions := map[string][]string{} // version → "dir: requires path"
	for _, m := range rel.modules {
		for _, r := range files[m.path].Require {
			if files[r.Mod.Path] != nil {
				versions[r.Mod.Version] = append(versions[r.Mod.Version], m.dir+"/go.mod requires "+r.Mod.String())
			}
		}
	}
	rel.version = want
	if want == "" {
		if len(versions) != 1 {
			return nil, fmt.Errorf("the modules require their siblings at %d versions, want one release version:\n  %s",
				len(versions), strings.Join(slices.Sorted(flatten(versions)), "\n  "))
		}
		for v := range versions {
			rel.version = v
		}
	}
	for v, uses := range versions {
		if v != rel.version {
			for _, u := range uses {
				problems = append(problems, u+", want "+rel.version)
			}
		}
	}
	for _, m := range rel.modules {
		if err := module.Check(m.path, rel.version); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if rel.version == "v0.0.0" {
		problems = append(problems, "v0.0.0 is no release: set one with -set vX.Y.Z")
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

// writeProxy writes rel's modules as a GOPROXY directory under tmp
// (the layout of `go help goproxy`) and returns its path. The zips are
// made from the commit, as the module proxy would make them from a tag.
func writeProxy(root, tmp string, rel *release) (string, error) {
	proxy := filepath.Join(tmp, "proxy")
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{rel.version, rel.time})
	if err != nil {
		return "", err
	}
	for _, m := range rel.modules {
		esc, err := module.EscapePath(m.path)
		if err != nil {
			return "", err
		}
		dir := filepath.Join(proxy, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		for name, data := range map[string][]byte{
			"list":                []byte(rel.version + "\n"),
			rel.version + ".info": info,
			rel.version + ".mod":  m.gomod,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return "", err
			}
		}
		zf, err := os.Create(filepath.Join(dir, rel.version+".zip"))
		if err != nil {
			return "", err
		}
		err = modzip.CreateFromVCS(zf, module.Version{Path: m.path, Version: rel.version}, root, rel.commit, m.dir)
		if cerr := zf.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", m.path, err)
		}
	}
	return proxy, nil
}

// setVersion makes every module of the working tree's go.work require its
// siblings at version, with go mod edit (only those lines change).
func setVersion(ctx context.Context, root, version string) error {
	if err := module.Check(repoPath+"/pkg", version); err != nil {
		return err
	}
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return err
	}
	wf, err := modfile.ParseWork("go.work", work, nil)
	if err != nil {
		return err
	}
	siblings := map[string]bool{}
	var gomods []string
	for _, u := range wf.Use {
		name := filepath.Join(root, filepath.FromSlash(u.Path), "go.mod")
		data, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			return err
		}
		if f.Module.Mod.Path != toolsModule {
			siblings[f.Module.Mod.Path] = true
			gomods = append(gomods, name)
		}
	}
	for _, name := range gomods {
		data, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			return err
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
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		fmt.Printf("release-check: %s requires its siblings at %s\n", name, version)
	}
	return nil
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
