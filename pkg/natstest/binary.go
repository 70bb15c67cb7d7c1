package natstest

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

// built holds one build per package path for the test binary's lifetime.
var built sync.Map // pkg → *build

type build struct {
	once sync.Once
	path string
	err  error
}

// Binary builds the command at pkg (a path relative to the test's package,
// "./cmd/tenaz-ingest") once per test run and returns the binary's path:
// crash and scale tests run the real service as a process and kill it.
func Binary(tb testing.TB, pkg string) string {
	tb.Helper()
	v, _ := built.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "tenaz-bin-*")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, path.Base(pkg))
		args := []string{"build", "-o", b.path}
		// In a go.work workspace go build stamps no VCS revision unless
		// asked (tenaz version prints it); outside a git checkout asking fails.
		if exec.Command("git", "rev-parse", "--is-inside-work-tree").Run() == nil {
			args = append(args, "-buildvcs=true")
		}
		if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}
