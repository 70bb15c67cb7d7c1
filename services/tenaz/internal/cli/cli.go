package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/tenaz/tenaz/pkg/ops"
)

// OperatorKeyEnv names the environment variable that holds the operator
// key (auth.operators) the commands send as "Authorization: Bearer <key>"
// to tenaz's operator endpoints. There is no flag: a key on the command
// line shows in ps and in shell history.
const OperatorKeyEnv = "TENAZ_OPERATOR_KEY"

// Commands are the operator commands; the tenaz binary embeds them next to
// `run` and `config`.
type Commands struct {
	Events   EventsCmd   `cmd:"" help:"Read an event, its history, or cancel it (tenaz-ingest)."`
	Dead     DeadCmd     `cmd:"" help:"Dead letters: list, show, replay, discard (tenaz-deadletter)."`
	Review   ReviewCmd   `cmd:"" help:"The manual review queue: list, resolve (tenaz-deadletter)."`
	Breakers BreakersCmd `cmd:"" help:"Circuit breakers per account and target: list, close, open (tenaz-deadletter)."`
	Accounts AccountsCmd `cmd:"" help:"Accounts' dispatch: pause, resume, list the paused, the audit of operator actions (tenaz-deadletter)."`
	Streams  StreamsCmd  `cmd:"" help:"The JetStream layout: apply it, or show its streams, consumers and buckets."`

	Entity EntityCmd `cmd:"" help:"What happened to a business entity: its timeline across its events (tenaz-deadletter, the audit archive)."`
	Audit  AuditCmd  `cmd:"" help:"The audit archive: export it as JSON Lines (tenaz-deadletter's HTTP API)."`

	Version    VersionCmd    `cmd:"" help:"Print the build (module version, VCS revision) and the nats-server it reaches."`
	Completion CompletionCmd `cmd:"" help:"Print the shell completion script: eval \"$(tenaz completion bash)\" (or zsh, fish)."`
}

// Env is the outside world of a command: its output streams, environment
// and whether stderr is a terminal (for the progress bar).
type Env struct {
	Stdout, Stderr io.Writer
	// Stdin is read by --payload -. Defaults to os.Stdin.
	Stdin  io.Reader
	Getenv func(string) string
	// StderrTTY draws progress bars on Stderr when true.
	StderrTTY bool
}

// OSEnv is the process's environment.
func OSEnv() *Env {
	return &Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin, Getenv: os.Getenv, StderrTTY: isTerminal(os.Stderr)}
}

// isTerminal reports whether f is a character device (a terminal), using
// only the standard library.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// exitPanic carries kong's exit (after --help) out of Parse.
type exitPanic int

// Main parses args into root (a struct with Commands embedded, or
// *Commands itself), runs the selected command, prints any error on
// env.Stderr, and returns the exit code. It never calls os.Exit.
func Main(root any, args []string, env *Env, opts ...kong.Option) (code int) {
	opts = append([]kong.Option{
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(c int) { panic(exitPanic(c)) }),
		kong.Vars{"default_server": DefaultServer, "url_env": URLEnv, "default_url": DefaultURL, "max_limit": strconv.Itoa(ops.MaxLimit), "default_limit": strconv.Itoa(ops.DefaultLimit),
			"max_selection": strconv.Itoa(ops.MaxSelection), "default_rate": strconv.FormatFloat(ops.DefaultRate, 'f', -1, 64)},
		kong.Bind(env),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	}, opts...)
	defer func() {
		if r := recover(); r != nil {
			c, ok := r.(exitPanic)
			if !ok {
				panic(r)
			}
			code = int(c)
		}
	}()
	parser, err := kong.New(root, opts...)
	if err != nil {
		fmt.Fprintln(env.Stderr, "tenaz: internal error:", err)
		return ExitError
	}
	completeShell(parser, env)
	kctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintln(env.Stderr, "tenaz:", err)
		var pe *kong.ParseError
		if errors.As(err, &pe) && pe.Context != nil {
			parser.Stdout = env.Stderr // the usage hint goes with the error
			_ = pe.Context.PrintUsage(true)
		}
		return ExitUsage
	}
	err = kctx.Run()
	if err == nil {
		return ExitOK
	}
	code = ExitCode(err)
	if jsonWanted(kctx) {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": errorCode(err), "message": err.Error(), "exit": code}})
		fmt.Fprintln(env.Stderr, string(b))
	} else {
		// A service's message may quote a tenant's bytes; a config's
		// lists its problems one per line.
		lines := strings.Split(err.Error(), "\n")
		for i, l := range lines {
			lines[i] = clean(l)
		}
		fmt.Fprintln(env.Stderr, "tenaz:", strings.Join(lines, "\n"))
	}
	return code
}

// jsonWanted reports whether the selected command asked for --json.
func jsonWanted(kctx *kong.Context) bool {
	for _, p := range kctx.Path {
		if p.Flag != nil && p.Flag.Name == "json" {
			return true
		}
	}
	return false
}
