// Command releasecheck proves that tenaz's modules can be used from a
// module outside this repository, as a release would publish them.
//
// Every module of go.work but this tools module is released together, at
// one version vX.Y.Z, as the tag <dir>/vX.Y.Z (github.com/tenaz/tenaz/<dir>),
// and each requires its siblings at that version. releasecheck reads the
// modules at a git revision (HEAD by default: what a tag of it would
// publish, uncommitted edits left out), checks that every sibling require
// names the release version, and writes a module proxy directory
// (<module>/@v/list, .info, .mod, .zip) from that revision. It then creates
// a fresh module in a temporary directory that does what docs/handlers.md
// tells a user to do — go get the dispatcher, register a handler, build —
// against that proxy alone for tenaz (GOWORK=off, an empty module cache),
// runs the program, and fails unless its handler was given the one event
// it submitted and the event ended done.
//
//	cd tools && go run ./releasecheck            # what make release-check runs
//	cd tools && go run ./releasecheck -set v0.2.0 # require siblings at v0.2.0 in every go.mod
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tenaz/tenaz/tools/internal/release"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "release-check:", err)
		os.Exit(1)
	}
}

func run() error {
	rev := flag.String("rev", "HEAD", "git revision to release")
	version := flag.String("version", "", "release version (defaults to the version the modules require of each other)")
	set := flag.String("set", "", "instead of checking: require every sibling at this version in the working tree's go.mod files")
	keep := flag.Bool("keep", false, "keep the temporary proxy and consumer module, and print where")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	root, err := release.Root(ctx, ".")
	if err != nil {
		return err
	}
	if *set != "" {
		changed, err := release.SetVersion(ctx, root, *set)
		for _, name := range changed {
			fmt.Printf("release-check: %s requires its siblings at %s\n", name, *set)
		}
		return err
	}

	start := time.Now()
	rel, err := release.Read(ctx, root, *rev, *version)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "tenaz-release-check-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Println("release-check: keeping", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	proxy := filepath.Join(tmp, "proxy")
	if err := rel.WriteProxy(root, proxy); err != nil {
		return err
	}
	fmt.Printf("release-check: proxy of %d modules at %s from %s (%.1fs)\n",
		len(rel.Modules), rel.Version, rel.Commit[:12], time.Since(start).Seconds())
	if err := checkConsumer(ctx, tmp, proxy, rel); err != nil {
		return err
	}
	fmt.Printf("release-check: ok, %s importable (%.1fs)\n", rel.Version, time.Since(start).Seconds())
	return nil
}
