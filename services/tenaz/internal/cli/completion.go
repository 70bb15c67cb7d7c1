package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/nats-io/jsm.go/natscontext"
	"github.com/posener/complete"
	"github.com/willabides/kongplete"
)

// CompletionCmd is `tenaz completion <shell>`.
type CompletionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"bash, zsh or fish."`
}

// completionScripts hook a shell's completion to the binary itself: the
// shell runs it with COMP_LINE set, and Main answers with the candidates
// (kongplete, from the same command model the parser uses).
var completionScripts = map[string]string{
	"bash": "complete -C ${bin} ${cmd}\n",
	"zsh":  "autoload -U +X bashcompinit && bashcompinit\ncomplete -C ${bin} ${cmd}\n",
	"fish": `function __complete_${cmd}
    set -lx COMP_LINE (commandline -cp)
    test -z (commandline -ct)
    and set COMP_LINE "$COMP_LINE "
    ${bin}
end
complete -f -c ${cmd} -a "(__complete_${cmd})"
`,
}

// Run prints the shell's script.
func (c *CompletionCmd) Run(kctx *kong.Context, env *Env) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("completion: cannot find the tenaz binary: %w", err)
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return fmt.Errorf("completion: cannot find the tenaz binary: %w", err)
	}
	vars := map[string]string{"bin": shellQuote(bin), "cmd": kctx.Model.Name}
	_, err = fmt.Fprint(env.Stdout, os.Expand(completionScripts[c.Shell], func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		return "$" + k
	}))
	return err
}

// shellQuote quotes s for sh, bash, zsh and fish when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// complete answers a shell's completion request (COMP_LINE in the
// process's environment, as posener/complete reads it) and exits; without
// one it returns at once.
func completeShell(parser *kong.Kong, env *Env) {
	kongplete.Complete(parser,
		kongplete.WithPredictor("file", complete.PredictFiles("*")),
		kongplete.WithPredictor("context", complete.PredictFunc(func(complete.Args) []string {
			names, _ := natscontext.NewRegistry(natscontext.NewFileBackendAt(configRoot(env.Getenv))).List(context.Background())
			return names
		})),
	)
}
