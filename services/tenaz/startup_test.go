package tenaz_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/services/tenaz"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// tenazExit runs cmd to its end (at most 30s) and returns its exit code
// and what it printed.
func tenazExit(t *testing.T, cmd *exec.Cmd) (int, string) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s: want it to exit, it still ran after 30s:\n%s", cmd, out.String())
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// `tenaz run` refuses a config it must not run, before it listens on
// anything: the process exits 2 (an invalid config) naming the key, with
// the file given by --config or by $TENAZ_CONFIG.
func TestRunRefusesUnsafeConfig(t *testing.T) {
	t.Parallel()
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("sixteen-byte-key"))
	tests := []struct {
		name     string
		edit     func(yaml string) string
		viaEnv   bool     // $TENAZ_CONFIG instead of --config
		want     []string // fragments of the output
		notShown string   // never printed
	}{
		{name: "empty callback secret", edit: func(y string) string {
			return strings.Replace(y, "erp: {url: ", `erp: {callback_secret: "whsec_", url: `, 1)
		}, want: []string{"targets.erp.callback_secret: decodes to a 0-byte key; at least 24 bytes are required"}},
		{name: "short signing secret, from $TENAZ_CONFIG", viaEnv: true, edit: func(y string) string {
			return strings.Replace(y, "erp: {url: ", `erp: {signing_secret: "`+short+`", url: `, 1)
		}, want: []string{"targets.erp.signing_secret: decodes to a 16-byte key"}, notShown: strings.TrimPrefix(short, "whsec_")},
		{name: "raw callback secret", edit: func(y string) string {
			return strings.Replace(y, "erp: {url: ", `erp: {callback_secret: "a-raw-secret-that-is-long-enough", url: `, 1)
		}, want: []string{`targets.erp.callback_secret: must be "whsec_" followed by`}, notShown: "a-raw-secret"},
		{name: "tolerance above an hour", edit: func(y string) string {
			return strings.Replace(y, "erp: {url: ", `erp: {callback: {tolerance: 2h}, url: `, 1)
		}, want: []string{"targets.erp.callback.tolerance: must be at most 1h"}},
		{name: "target timeout longer than the drain", edit: func(y string) string {
			return strings.Replace(y, "timeout: 5s}", "timeout: 30s}", 1)
		}, want: []string{"targets.erp.timeout: 30s does not fit in the drain on stop: at most stop_timeout (20s) minus 5s"}},
		{name: "two problems, one per line", edit: func(y string) string {
			return strings.Replace(strings.Replace(y, "timeout: 5s}", "timeout: 30s}", 1), "erp: {url: ", `erp: {callback: {tolerance: 2h}, url: `, 1)
		}, want: []string{"targets.erp.callback.tolerance: must be at most 1h", "\ntargets.erp.timeout: 30s does not fit"}},
		{name: "embedded NATS beyond loopback without credentials", edit: func(y string) string {
			return strings.Replace(y, `listen: "127.0.0.1:-1"`, `listen: "0.0.0.0:-1"`, 1)
		}, want: []string{`nats.embedded.listen: "0.0.0.0:-1" is beyond loopback`, "nats.user and nats.password, nats.token or nats.nkey_seed_file"}},
		{name: "HTTP auth on, embedded NATS without credentials", edit: func(y string) string {
			return strings.Replace(y, "auth: {disabled: true}\n", "auth: {operators: {alice: {hash: \""+secAliceHash+"\"}}}\n", 1)
		}, want: []string{"nats: HTTP auth is on", "nats.user and nats.password, nats.token or nats.nkey_seed_file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			file := filepath.Join(dir, "bad.yaml")
			if err := os.WriteFile(file, []byte(tc.edit(testConfig(filepath.Join(dir, "data"), "http://127.0.0.1:1", ""))), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := tenazCmd(t, dir, nil, "run", "--config", file)
			if tc.viaEnv {
				cmd = tenazCmd(t, dir, []string{"TENAZ_CONFIG=" + file}, "run")
			}
			code, out := tenazExit(t, cmd)
			if code != cli.ExitUsage {
				t.Fatalf("want exit %d (invalid config), got %d:\n%s", cli.ExitUsage, code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("want the output to contain %q, got:\n%s", w, out)
				}
			}
			if strings.Contains(out, `\n`) {
				t.Errorf("want the problems one per line, got them escaped onto one:\n%s", out)
			}
			if tc.notShown != "" && strings.Contains(out, tc.notShown) {
				t.Errorf("the output shows the secret:\n%s", out)
			}
			if strings.Contains(out, "tenaz running") {
				t.Errorf("want no start, got:\n%s", out)
			}
		})
	}
}

// With no --config, `tenaz run` reads the file named by $TENAZ_CONFIG,
// as every service binary does, and not the built-in demo.
func TestRunReadsTenazConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeConfig(t, dir, "http://127.0.0.1:1")
	p := startTenaz(t, tenazCmd(t, t.TempDir(), []string{"TENAZ_CONFIG=" + file}, "run"))
	var from string
	for _, line := range strings.Split(p.out.String(), "\n") {
		var l struct{ Message, Config string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "starting tenaz" {
			from = l.Config
		}
	}
	if from != file {
		t.Fatalf("want tenaz started from %s, got %q:\n%s", file, from, p.out)
	}
	if strings.Contains(p.out.String(), tenaz.DemoNotice) {
		t.Fatalf("want no demo notice with a config file, got:\n%s", p.out)
	}
	if err := p.signal(t, syscall.SIGTERM); err != nil {
		t.Fatalf("want exit 0 after SIGTERM, got %v", err)
	}
}

// With no config at all, `tenaz run` runs the built-in demo and says so:
// a warning when it starts and a line in its banner. (The addresses are
// moved to free ports; TestDemoConfigIsValid checks the demo's own.)
func TestRunDemoSaysSo(t *testing.T) {
	t.Parallel()
	env := []string{
		"TENAZ_NATS_EMBEDDED_STORE_DIR=" + t.TempDir(), "TENAZ_NATS_EMBEDDED_LISTEN=127.0.0.1:-1",
		"TENAZ_HTTP_ADDR=127.0.0.1:0", "TENAZ_DEMO_PROVIDER=127.0.0.1:0",
		"TENAZ_DEMO_BUREAU_A=127.0.0.1:0", "TENAZ_DEMO_BUREAU_B=127.0.0.1:0", "TENAZ_CONFIG=",
	}
	p := startTenaz(t, tenazCmd(t, t.TempDir(), env, "run"))
	warned := false
	for _, line := range strings.Split(p.out.String(), "\n") {
		var l struct{ Level, Message string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Level == "warn" && l.Message == tenaz.DemoNotice {
			warned = true
		}
	}
	if !warned {
		t.Errorf("want a warning %q at start, got:\n%s", tenaz.DemoNotice, p.out)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { // the banner follows the "tenaz running" line
		return strings.Contains(p.out.String(), "\n"+tenaz.DemoNotice+"\n")
	}, "the banner line %q in the output:\n%s", tenaz.DemoNotice, p.out)
	if err := p.signal(t, syscall.SIGTERM); err != nil {
		t.Fatalf("want exit 0 after SIGTERM, got %v", err)
	}
}

// An embedded nats-server without credentials is refused where it would
// be a way around the HTTP API's keys (NATS checks no account): with HTTP
// auth on, or on an address beyond loopback. With credentials both start.
func TestEmbeddedNATSNeedsCredentials(t *testing.T) {
	t.Parallel()
	creds := func(y string) string {
		return strings.Replace(y, "nats:\n", "nats:\n  user: tenaz\n  password: n4ts-pw-0123\n", 1)
	}
	anyAddr := func(y string) string {
		return strings.Replace(y, `listen: "127.0.0.1:-1"`, `listen: "0.0.0.0:-1"`, 1)
	}
	tests := []struct {
		name string
		yaml string
		want []string // "" when it must start
	}{
		{"HTTP auth on", securedConfig(t.TempDir(), "http://127.0.0.1:1", ""), []string{"nats: HTTP auth is on"}},
		{"beyond loopback", anyAddr(testConfig(t.TempDir(), "http://127.0.0.1:1", "")), []string{"nats.embedded.listen: \"0.0.0.0:-1\" is beyond loopback"}},
		{"both", anyAddr(securedConfig(t.TempDir(), "http://127.0.0.1:1", "")), []string{"nats: HTTP auth is on", "nats.embedded.listen:"}},
		{"HTTP auth on, with credentials", creds(securedConfig(t.TempDir(), "http://127.0.0.1:1", "")), nil},
		{"beyond loopback, with credentials", creds(anyAddr(securedConfig(t.TempDir(), "http://127.0.0.1:1", ""))), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.want == nil {
				startWith(t, tc.yaml, tenaz.Options{}) // fails the test unless it starts
				return
			}
			err := refused(t, servicetest.Config(t, tc.yaml, nil))
			if !errors.Is(err, config.ErrInvalidConfig) {
				t.Errorf("want an error wrapping config.ErrInvalidConfig, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("want the error to contain %q, got %v", w, err)
				}
			}
		})
	}
}

// A busy nats.embedded.listen port refuses the start at once with an
// error naming the key and the address, not a readiness timeout.
func TestEmbeddedNATSPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	yaml := strings.Replace(testConfig(t.TempDir(), "http://127.0.0.1:1", ""), `listen: "127.0.0.1:-1"`, `listen: "`+ln.Addr().String()+`"`, 1)
	err = refused(t, servicetest.Config(t, yaml, nil))
	if want := "nats.embedded.listen: " + ln.Addr().String() + ": address already in use"; err.Error() != want {
		t.Errorf("want the error %q, got %q", want, err)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("want an error wrapping EADDRINUSE, got %#v", err)
	}
}
