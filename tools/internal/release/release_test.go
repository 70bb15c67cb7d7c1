package release_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/tenaz/tenaz/tools/internal/release"
)

// repo commits files into a new git repository and returns its root.
func repo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, data := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"commit", "-q", "-m", "release"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return root
}

// layout is a workspace of three released modules and tools, pkg required
// at pkgVersion by both services.
func layout(pkgVersion string) map[string]string {
	return map[string]string{
		"go.work":                    "go 1.26.8\n\nuse (\n\t./pkg\n\t./services/dispatcher\n\t./services/poller\n\t./tools\n)\n",
		"pkg/go.mod":                 "module github.com/tenaz/tenaz/pkg\n\ngo 1.26.8\n",
		"pkg/pkg.go":                 "package pkg\n",
		"services/dispatcher/go.mod": "module github.com/tenaz/tenaz/services/dispatcher\n\ngo 1.26.8\n\nrequire github.com/tenaz/tenaz/pkg " + pkgVersion + "\n\nreplace github.com/tenaz/tenaz/pkg => ../../pkg\n",
		"services/dispatcher/d.go":   "package dispatcher\n",
		"services/poller/go.mod":     "module github.com/tenaz/tenaz/services/poller\n\ngo 1.26.8\n\nrequire github.com/tenaz/tenaz/pkg " + pkgVersion + "\n",
		"services/poller/p.go":       "package poller\n",
		"tools/go.mod":               "module github.com/tenaz/tenaz/tools\n\ngo 1.26.8\n",
	}
}

func TestReadWritesAProxyOfEveryReleasedModule(t *testing.T) {
	t.Parallel()
	root := repo(t, layout("v0.3.0"))
	rel, err := release.Read(context.Background(), root, "HEAD", "")
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if rel.Version != "v0.3.0" {
		t.Errorf("Version = %q, want v0.3.0 (the version the siblings require)", rel.Version)
	}
	var paths []string
	for _, m := range rel.Modules {
		paths = append(paths, m.Path)
	}
	if got, want := strings.Join(paths, " "), "github.com/tenaz/tenaz/pkg github.com/tenaz/tenaz/services/dispatcher github.com/tenaz/tenaz/services/poller"; got != want {
		t.Errorf("modules %q, want %q (tools is not released)", got, want)
	}

	proxy := t.TempDir()
	if err := rel.WriteProxy(root, proxy); err != nil {
		t.Fatalf("WriteProxy: %v", err)
	}
	at := filepath.Join(proxy, "github.com", "tenaz", "tenaz", "services", "dispatcher", "@v")
	list, err := os.ReadFile(filepath.Join(at, "list"))
	if err != nil || string(list) != "v0.3.0\n" {
		t.Errorf("@v/list = %q, %v; want \"v0.3.0\\n\"", list, err)
	}
	mod, err := os.ReadFile(filepath.Join(at, "v0.3.0.mod"))
	if err != nil || !strings.Contains(string(mod), "require github.com/tenaz/tenaz/pkg v0.3.0") {
		t.Errorf("v0.3.0.mod = %q, %v; want the committed go.mod", mod, err)
	}
	cf, err := modzip.CheckZip(module.Version{Path: "github.com/tenaz/tenaz/services/dispatcher", Version: "v0.3.0"}, filepath.Join(at, "v0.3.0.zip"))
	if err != nil {
		t.Fatalf("CheckZip: %v", err)
	}
	prefix := "github.com/tenaz/tenaz/services/dispatcher@v0.3.0/"
	if got, want := strings.Join(cf.Valid, " "), prefix+"d.go "+prefix+"go.mod"; got != want {
		t.Errorf("zip holds %q, want %q", got, want)
	}
}

func TestReadRefusesWhatIsNoRelease(t *testing.T) {
	t.Parallel()
	mixed := layout("v0.3.0")
	mixed["services/poller/go.mod"] = strings.Replace(mixed["services/poller/go.mod"], "v0.3.0", "v0.2.0", 1)
	moved := layout("v0.3.0")
	moved["pkg/go.mod"] = "module example.com/pkg\n\ngo 1.26.8\n"
	for _, tc := range []struct {
		name    string
		files   map[string]string
		version string
		want    []string
	}{
		{"two versions", mixed, "", []string{"at 2 versions", "services/dispatcher/go.mod requires github.com/tenaz/tenaz/pkg@v0.3.0", "services/poller/go.mod requires github.com/tenaz/tenaz/pkg@v0.2.0"}},
		{"a version but the one asked", layout("v0.3.0"), "v0.4.0", []string{"services/dispatcher/go.mod requires github.com/tenaz/tenaz/pkg@v0.3.0, want v0.4.0"}},
		{"v0.0.0", layout("v0.0.0"), "", []string{"v0.0.0 is no release"}},
		{"a module off its directory's path", moved, "", []string{"pkg/go.mod: module example.com/pkg, want github.com/tenaz/tenaz/pkg"}},
		{"a major version its path does not carry", layout("v2.0.0"), "", []string{"v2.0.0", "should be v0 or v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := release.Read(context.Background(), repo(t, tc.files), "HEAD", tc.version)
			if err == nil {
				t.Fatal("Read: no error, want one")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Read: %v\nwant it to say %q", err, w)
				}
			}
		})
	}
}

func TestWriteProxyRefusesAFileAModuleZipCannotHold(t *testing.T) {
	t.Parallel()
	files := layout("v0.3.0")
	files["pkg/testdata/fuzz/FuzzX/nul"] = "go test fuzz v1\n"
	root := repo(t, files)
	rel, err := release.Read(context.Background(), root, "HEAD", "")
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	err = rel.WriteProxy(root, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "testdata/fuzz/FuzzX/nul") {
		t.Fatalf("WriteProxy: %v, want an error naming testdata/fuzz/FuzzX/nul", err)
	}
}
