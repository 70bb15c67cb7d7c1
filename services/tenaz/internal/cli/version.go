package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"time"
)

// versionConnectTimeout bounds how long `tenaz version` tries to reach
// NATS for the server's version: the version is wanted at once, and no
// server is no error.
const versionConnectTimeout = 2 * time.Second

// VersionCmd is `tenaz version`.
type VersionCmd struct {
	Connection `embed:""`
}

// Version is what `tenaz version` prints: the build (from the binary's
// build information) and the nats-server it reaches, if any.
type Version struct {
	// Version is the module version: a release tag when installed with
	// go install …@vX, a pseudo-version stamped from git, or "(devel)".
	Version string `json:"version"`
	// Module is the main module's path.
	Module string `json:"module"`
	// Revision, CommitTime and Modified are the VCS stamp of the build
	// (absent when built without VCS information).
	Revision   string     `json:"revision,omitempty"`
	CommitTime *time.Time `json:"commit_time,omitempty"`
	Modified   bool       `json:"modified,omitempty"`
	// Go is the toolchain that built it; Platform its GOOS/GOARCH.
	Go       string `json:"go"`
	Platform string `json:"platform"`
	// NATSServer is the server the connection flags reach.
	NATSServer NATSServer `json:"nats_server"`
}

// NATSServer is the nats-server `tenaz version` reached, or why not.
type NATSServer struct {
	URL     string `json:"url"`
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
}

// buildVersion reads the binary's build information.
func buildVersion() Version {
	v := Version{Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Version, v.Module = bi.Main.Version, bi.Main.Path
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				v.CommitTime = &t
			}
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// Run prints the version; an unreachable server is reported, not an error.
func (c *VersionCmd) Run(cl *Connection, env *Env) error {
	v := buildVersion()
	probe := *cl
	probe.Timeout = min(probe.Timeout, versionConnectTimeout)
	nc, nctx, err := probe.connect(env)
	switch {
	case err == nil:
		v.NATSServer = NATSServer{URL: nc.ConnectedUrlRedacted(), Version: nc.ConnectedServerVersion()}
		nc.Close()
	case nctx != nil:
		v.NATSServer = NATSServer{URL: nctx.ServerURL(), Error: err.Error()}
	default:
		v.NATSServer = NATSServer{URL: first(cl.Server, env.Getenv("NATS_URL"), DefaultServer), Error: err.Error()}
	}
	return emit(cl, env, v, func(w io.Writer) {
		row(w, "tenaz", v.Version)
		row(w, "module", v.Module)
		if v.Revision != "" {
			rev := v.Revision
			if v.Modified {
				rev += " (modified)"
			}
			row(w, "revision", rev)
		}
		if v.CommitTime != nil {
			row(w, "commit time", *v.CommitTime)
		}
		row(w, "go", v.Go+" "+v.Platform)
		if v.NATSServer.Error != "" {
			row(w, "nats-server", fmt.Sprintf("not reached at %s: %s", v.NATSServer.URL, v.NATSServer.Error))
		} else {
			row(w, "nats-server", v.NATSServer.Version+" at "+v.NATSServer.URL)
		}
	})
}
