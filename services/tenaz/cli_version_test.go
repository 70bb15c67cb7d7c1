package tenaz_test

import (
	"debug/buildinfo"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// tenaz version prints the binary's own build information (what Go's
// debug/buildinfo reads from the file: module, version and, from a git
// checkout, the revision of HEAD) and the version of the nats-server it
// reaches; no server is reported, not an error.
func TestCLIVersion(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	bin := tenazBinary(t)
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	setting := func(k string) string {
		for _, s := range bi.Settings {
			if s.Key == k {
				return s.Value
			}
		}
		return ""
	}
	version := func(url string, args ...string) (cli.Version, string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"version"}, args...)...)
		cmd.Env = []string{"NATS_URL=" + url, "XDG_CONFIG_HOME=" + t.TempDir(), "HOME=" + t.TempDir()}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("tenaz version %v: %v\n%s", args, err, out)
		}
		var v cli.Version
		if len(args) > 0 {
			dec := json.NewDecoder(strings.NewReader(string(out)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("tenaz version --json: %v\n%s", err, out)
			}
		}
		return v, string(out)
	}

	v, _ := version(srv.ClientURL(), "--json")
	if v.Module != "github.com/tenaz/tenaz/services/tenaz" || v.Module != bi.Main.Path || v.Version != bi.Main.Version || v.Go != bi.GoVersion {
		t.Fatalf("version: want module %s %s built with %s, got %+v", bi.Main.Path, bi.Main.Version, bi.GoVersion, v)
	}
	if v.Revision != setting("vcs.revision") || v.Modified != (setting("vcs.modified") == "true") {
		t.Fatalf("version: want revision %q (modified %s) as built, got %+v", setting("vcs.revision"), setting("vcs.modified"), v)
	}
	// natstest.Binary builds from this checkout: the revision is a commit
	// of it (HEAD when built; others may commit since).
	if out, err := exec.Command("git", "merge-base", "--is-ancestor", v.Revision, "HEAD").CombinedOutput(); len(v.Revision) != 40 || err != nil {
		t.Fatalf("version: want a commit of this checkout's history, got %q (%v %s)", v.Revision, err, out)
	}
	if v.NATSServer.Version != server.VERSION || v.NATSServer.URL != srv.ClientURL() || v.NATSServer.Error != "" {
		t.Fatalf("version: want nats-server %s at %s, got %+v", server.VERSION, srv.ClientURL(), v.NATSServer)
	}
	_, table := version(srv.ClientURL())
	rows := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(table), "\n") {
		label, value, _ := strings.Cut(l, "  ")
		rows[label] = strings.TrimSpace(value)
	}
	for label, want := range map[string]string{"tenaz": v.Version, "module": v.Module, "nats-server": server.VERSION + " at " + srv.ClientURL()} {
		if rows[label] != want {
			t.Fatalf("version table: want %s %q, got\n%s", label, want, table)
		}
	}
	if !strings.HasPrefix(rows["revision"], v.Revision) {
		t.Fatalf("version table: want revision %s, got\n%s", v.Revision, table)
	}

	v, _ = version("nats://127.0.0.1:1", "--json")
	if v.NATSServer.Version != "" || v.NATSServer.URL != "nats://127.0.0.1:1" || !strings.Contains(v.NATSServer.Error, "no servers") {
		t.Fatalf("version without a server: want the unreachable URL and why, got %+v", v.NATSServer)
	}
}
