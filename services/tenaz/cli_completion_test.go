package tenaz_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// tenaz completion prints a script that hooks the shell to the binary
// itself (bash accepts it), and the binary answers the shell's request
// (COMP_LINE) from its command model: subcommands, an enum flag's values,
// and the natscli contexts of the config dir for --context.
func TestCLICompletion(t *testing.T) {
	t.Parallel()
	bin := tenazBinary(t)
	xdg := t.TempDir()
	for _, name := range []string{"dev", "prod"} {
		writeNATSContext(t, xdg, name, `{"url":"nats://127.0.0.1:4222"}`)
	}
	run := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"XDG_CONFIG_HOME=" + xdg, "HOME=" + t.TempDir()}, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tenaz %v %v: %v\n%s", env, args, err, out)
		}
		return string(out)
	}

	script := run(nil, "completion", "bash")
	if script != "complete -C "+bin+" tenaz\n" {
		t.Fatalf("completion bash: want complete -C %s tenaz, got %q", bin, script)
	}
	out, err := exec.Command("bash", "-c", script+"complete -p tenaz").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "complete -C '"+bin+"' tenaz") && !strings.Contains(string(out), "complete -C "+bin+" tenaz") {
		t.Fatalf("bash with the script: want tenaz completed by %s, got %v\n%s", bin, err, out)
	}
	for _, shell := range []string{"zsh", "fish"} {
		if s := run(nil, "completion", shell); !strings.Contains(s, bin) || !strings.Contains(s, "tenaz") {
			t.Fatalf("completion %s: want a script running %s, got\n%s", shell, bin, s)
		}
	}

	complete := func(line string) []string {
		t.Helper()
		got := strings.Fields(run([]string{"COMP_LINE=" + line, "COMP_POINT=" + strconv.Itoa(len(line))}))
		slices.Sort(got)
		return got
	}
	for _, c := range []struct {
		line string
		want []string
	}{
		{"tenaz dead re", []string{"replay"}},
		{"tenaz ver", []string{"version"}},
		{"tenaz review resolve ev_x --outcome ", []string{"discard", "done", "requeue_fallback", "requeue_primary"}},
		{"tenaz events get --context ", []string{"dev", "prod"}},
		{"tenaz completion ", []string{"bash", "fish", "zsh"}},
	} {
		if got := complete(c.line); !slices.Equal(got, c.want) {
			t.Errorf("complete %q: want %v, got %v", c.line, c.want, got)
		}
	}
}

// writeNATSContext writes a natscli context file under xdg.
func writeNATSContext(t *testing.T, xdg, name, body string) {
	t.Helper()
	dir := filepath.Join(xdg, "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}
