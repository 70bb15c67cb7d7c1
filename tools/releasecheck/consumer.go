package main

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"

	"github.com/tenaz/tenaz/tools/internal/release"
)

// consumerSrc is the outside module's program: it embeds the dispatcher
// with its own handler.
//
//go:embed testdata/consumer/main.go
var consumerSrc embed.FS

// checkConsumer builds and runs, in a fresh module under tmp, the program a
// user of docs/handlers.md would write, against the proxy for every tenaz
// module, and fails unless it reports that its handler ran.
func checkConsumer(ctx context.Context, tmp, proxy string, rel *release.Release) error {
	dir := filepath.Join(tmp, "greeter")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	src, err := consumerSrc.ReadFile("testdata/consumer/main.go")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
		return err
	}
	env, err := consumerEnv(ctx, tmp, proxy)
	if err != nil {
		return err
	}
	goCmd := func(args ...string) (string, error) {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		fmt.Printf("release-check: go %s (%.1fs)\n", strings.Join(args, " "), time.Since(t0).Seconds())
		if err != nil {
			return "", fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, out)
		}
		return string(out), nil
	}

	dispatcher := release.RepoPath + "/services/dispatcher"
	for _, args := range [][]string{
		{"mod", "init", "example.com/greeter"},
		{"get", dispatcher + "@" + rel.Version},
		{"mod", "tidy"},
	} {
		if _, err := goCmd(args...); err != nil {
			return err
		}
	}
	graph, err := goCmd("mod", "graph")
	if err != nil {
		return err
	}
	if err := checkRequires(filepath.Join(dir, "go.mod"), rel, graph); err != nil {
		return err
	}
	// Every tenaz module comes from the proxy into the fresh module cache,
	// none from the checkout.
	out, err := goCmd("list", "-m", "-f", "{{.Path}} {{.Version}} {{.Dir}}", release.RepoPath+"/...")
	if err != nil {
		return err
	}
	cache := filepath.Join(tmp, "modcache") + string(filepath.Separator)
	listed := map[string]bool{}
	for l := range strings.Lines(out) {
		f := strings.Fields(l)
		if len(f) != 3 || f[1] != rel.Version || !strings.HasPrefix(f[2], cache) {
			return fmt.Errorf("go list -m: %q, want every tenaz module at %s from %s", strings.TrimSpace(l), rel.Version, cache)
		}
		listed[f[0]] = true
	}
	if !listed[dispatcher] {
		return fmt.Errorf("go list -m lists no %s:\n%s", dispatcher, out)
	}
	bin := filepath.Join(tmp, "greeter-bin")
	if _, err := goCmd("build", "-trimpath", "-o", bin, "."); err != nil {
		return err
	}

	t0 := time.Now()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	fmt.Printf("release-check: greeter (%.1fs): %s", time.Since(t0).Seconds(), stdout.String())
	if err != nil {
		return fmt.Errorf("greeter: %w\n%s%s", err, stdout.Bytes(), stderr.Bytes())
	}
	if !strings.HasPrefix(stdout.String(), "handler ran: ") || !strings.Contains(stdout.String(), "status done") {
		return fmt.Errorf("greeter exited 0 without reporting its handler ran and the event done:\n%s%s", stdout.Bytes(), stderr.Bytes())
	}
	return nil
}

// checkRequires checks the user's go.mod after go get and tidy: the
// dispatcher and every other tenaz module at the release version, no
// replace line (a consumer of a published module has none), and no
// module that only the user's go.mod requires in graph (go mod graph).
// The program imports nothing but tenaz and nats.go, so such a module
// provides a package that tenaz imports and a tenaz go.mod does not
// require: go get looked it up at whatever version was latest.
func checkRequires(name string, rel *release.Release, graph string) error {
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return err
	}
	if len(f.Replace) > 0 {
		return fmt.Errorf("%s has replace lines:\n%s", name, data)
	}
	found := false
	for _, r := range f.Require {
		if !strings.HasPrefix(r.Mod.Path, release.RepoPath+"/") {
			continue
		}
		if r.Mod.Version != rel.Version {
			return fmt.Errorf("%s requires %s, want %s:\n%s", name, r.Mod, rel.Version, data)
		}
		found = found || r.Mod.Path == release.RepoPath+"/services/dispatcher"
	}
	if !found {
		return fmt.Errorf("%s does not require the dispatcher:\n%s", name, data)
	}
	required := map[string]bool{} // by a module other than the user's
	for l := range strings.Lines(graph) {
		if from, to, ok := strings.Cut(strings.TrimSpace(l), " "); ok && strings.Contains(from, "@") {
			path, _, _ := strings.Cut(to, "@")
			required[path] = true
		}
	}
	var orphans []string
	for _, r := range f.Require {
		if !strings.HasPrefix(r.Mod.Path, release.RepoPath+"/") && !required[r.Mod.Path] {
			orphans = append(orphans, r.Mod.String())
		}
	}
	if len(orphans) > 0 {
		return fmt.Errorf("%s requires %s, which no module of tenaz's graph requires: a tenaz go.mod misses it (make tidy)",
			name, strings.Join(orphans, ", "))
	}
	return nil
}

// consumerEnv is a user's go environment with tenaz's modules published
// only in the proxy directory: no workspace, its own module cache (the
// release version is fixed while the checkout changes, and the cache never
// refetches a version), tenaz's modules unknown to the checksum database.
// Third-party modules come from the caller's module cache where present,
// else from the caller's proxies; their checksums are verified as usual.
func consumerEnv(ctx context.Context, tmp, proxy string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	vals := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(vals) != 2 {
		return nil, fmt.Errorf("go env GOMODCACHE GOPROXY: %q", out)
	}
	proxies := []string{"file://" + filepath.ToSlash(proxy), "file://" + filepath.ToSlash(filepath.Join(vals[0], "cache", "download"))}
	for p := range strings.FieldsFuncSeq(vals[1], func(r rune) bool { return r == ',' || r == '|' }) {
		// "direct" would ask GitHub for tenaz's other path prefixes, which
		// this machine may not reach; "off" ends the list.
		if p != "direct" && p != "off" {
			proxies = append(proxies, p)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOWORK", "GOFLAGS", "GOPROXY", "GOMODCACHE", "GONOSUMDB", "GONOPROXY", "GOPRIVATE", "GOINSECURE", "GOTOOLCHAIN":
		default:
			env = append(env, kv)
		}
	}
	return append(env,
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw",
		"GOTOOLCHAIN=local",
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOPROXY="+strings.Join(proxies, ","),
		"GONOSUMDB="+release.RepoPath,
		"GONOPROXY=",
		"GOPRIVATE=",
	), nil
}
