package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// errDeclined is the answer of a confirmation that was not yes.
var errDeclined = errors.New("not confirmed: nothing was done (answer y, or pass --yes)")

// confirm says on stderr what an action will do and asks whether to go
// on, reading the answer from stdin (a script passes --yes): only "y" or
// "yes" goes on; anything else, or no answer, does nothing.
func confirm(env *Env, yes bool, what string) error {
	if yes {
		return nil
	}
	fmt.Fprintf(env.Stderr, "%s.\nProceed? [y/N] ", what)
	in := env.Stdin
	if in == nil {
		in = os.Stdin
	}
	line, _ := bufio.NewReader(in).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	fmt.Fprintln(env.Stderr)
	return errDeclined
}

// untilFlags reads --until (RFC 3339) and --for (a duration; nil when not
// given) into what the requests take; at most one of them. A --for that
// is not positive is refused: sent as no end, --for 0s would pause until
// resumed.
func untilFlags(until string, dur *time.Duration) (*time.Time, string, error) {
	switch {
	case until != "" && dur != nil:
		return nil, "", failf(ErrUsage, "give --until or --for, not both")
	case until != "":
		t, err := time.Parse(time.RFC3339, until)
		if err != nil {
			return nil, "", failf(ErrUsage, "--until %q: want an RFC 3339 time (2026-11-30T08:00:00Z)", until)
		}
		return &t, "", nil
	case dur != nil && *dur <= 0:
		return nil, "", failf(ErrUsage, "--for %s: want a positive duration (30m, 2h)", *dur)
	case dur != nil:
		return nil, dur.String(), nil
	}
	return nil, "", nil
}

// ending says when a pause or an opened breaker ends, for a confirmation.
func ending(until *time.Time, dur string) string {
	switch {
	case until != nil:
		return " until " + stamp(*until)
	case dur != "":
		return " for " + dur
	}
	return ""
}
