package tenaz_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// The tenaz binary reads natscli contexts as natscli does (natscontext):
// from a real XDG_CONFIG_HOME, the selected one from context.txt, another
// by --context or NATS_CONTEXT; a password given as env://VAR is read from
// the environment, an nkey seed file path expands $VAR. The server wants
// credentials, so each run proves what the context supplied.
func TestCLINATSContextFromConfigDir(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	srv, err := natsd.Start(natsd.Options{StoreDir: t.TempDir(), Configure: func(o *server.Options) {
		o.Users = []*server.User{{Username: "ops", Password: "s3cret-from-env"}}
		o.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsd.Shutdown(srv) })

	xdg := t.TempDir()
	if err := os.WriteFile(filepath.Join(xdg, "ops.nk"), seed, 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) { writeNATSContext(t, xdg, name, body) }
	write("byenv", fmt.Sprintf(`{"url":%q,"user":"ops","password":"env://TZ_TEST_NATS_PASSWORD"}`, srv.ClientURL()))
	write("bynkey", fmt.Sprintf(`{"url":%q,"nkey":"$XDG_CONFIG_HOME/ops.nk"}`, srv.ClientURL()))
	write("nobody", fmt.Sprintf(`{"url":%q}`, srv.ClientURL()))
	if err := os.WriteFile(filepath.Join(xdg, "nats", "context.txt"), []byte("byenv"), 0o600); err != nil {
		t.Fatal(err)
	}

	bin := tenazBinary(t)
	run := func(env []string, args ...string) (int, string, string) {
		t.Helper()
		return runBinary(t, bin, append([]string{"XDG_CONFIG_HOME=" + xdg, "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, env...), args...)
	}

	// The selected context, its password from the environment.
	withPassword := []string{"TZ_TEST_NATS_PASSWORD=s3cret-from-env"}
	if code, out, errOut := run(withPassword, "streams", "apply"); code != cli.ExitOK || !strings.Contains(out, "applied with prefix") {
		t.Fatalf("streams apply with the selected context byenv: want exit 0, got %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := run(nil, "streams", "status"); code != cli.ExitUsage || !strings.Contains(errOut, "TZ_TEST_NATS_PASSWORD") {
		t.Fatalf("env:// password unset: want a usage error naming the variable, got %d: %s", code, errOut)
	}
	// Another context by flag and by NATS_CONTEXT: an nkey whose path expands $XDG_CONFIG_HOME.
	if code, out, errOut := run(nil, "streams", "status", "--context", "bynkey"); code != cli.ExitOK || !strings.Contains(out, "INTAKE") {
		t.Fatalf("--context bynkey: want exit 0 with the layout, got %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := run([]string{"NATS_CONTEXT=bynkey"}, "streams", "status"); code != cli.ExitOK {
		t.Fatalf("NATS_CONTEXT=bynkey: want exit 0, got %d: %s", code, errOut)
	}
	// A context without credentials is refused by the server: it was used, not the selected one.
	if code, _, errOut := run(withPassword, "streams", "status", "--context", "nobody"); code != cli.ExitError || !strings.Contains(strings.ToLower(errOut), "authorization") {
		t.Fatalf("--context nobody: want the server's authorization error, got %d: %s", code, errOut)
	}
	// Flags override the context's fields, as in natscli.
	if code, _, errOut := run(nil, "streams", "status", "--context", "nobody", "--user", "ops", "--password", "s3cret-from-env"); code != cli.ExitOK {
		t.Fatalf("--context nobody with --user/--password: want exit 0, got %d: %s", code, errOut)
	}
	if code, _, errOut := run(nil, "streams", "status", "--context", "nosuch"); code != cli.ExitUsage || !strings.Contains(errOut, "nosuch") {
		t.Fatalf("--context nosuch: want a usage error naming it, got %d: %s", code, errOut)
	}
}
