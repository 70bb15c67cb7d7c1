package metrics

import (
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// modulePath is the module of this package: its version is tenaz's in a
// program that embeds tenaz, where the main module is the user's.
const modulePath = "github.com/tenaz/tenaz/pkg"

// BuildInfo says which tenaz a binary is, as tenaz_build_info labels it.
type BuildInfo struct {
	// Version is the module version tenaz was built at ("v0.4.0", a
	// pseudo-version, or "(devel)" for a build of a checkout without VCS
	// information).
	Version string
	// Revision is the VCS revision of the build, with "-dirty" when the
	// checkout had changes; "unknown" without VCS information (a build
	// with -buildvcs=false, or outside a checkout).
	Revision string
	// GoVersion is the Go toolchain the binary was built with.
	GoVersion string
}

// Build reads the binary's build information (debug.ReadBuildInfo).
func Build() BuildInfo {
	b := BuildInfo{Version: "(devel)", Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath && d.Version != "" && d.Version != "(devel)" {
			b.Version = d.Version
		}
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "unknown" {
		b.Revision += "-dirty"
	}
	return b
}

// SemVer is the build's version as semantic versioning, as every tenaz
// NATS micro service reports it (`nats micro ls`): Version without its
// "v" ("v0.4.0" is "0.4.0", a pseudo-version keeps its pre-release). A
// build without a module version ("(devel)": a checkout built in the
// workspace) is "0.0.0-devel", with its revision's first 12 characters as
// build metadata when known ("0.0.0-devel+eabbc24b1f8b").
func (b BuildInfo) SemVer() string {
	if v, ok := strings.CutPrefix(b.Version, "v"); ok && v != "" && v[0] >= '0' && v[0] <= '9' {
		return v
	}
	rev := strings.TrimSuffix(b.Revision, "-dirty")
	if rev == "" || rev == "unknown" || strings.ContainsFunc(rev, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return "0.0.0-devel"
	}
	return "0.0.0-devel+" + rev[:min(len(rev), 12)]
}

// buildMetric is tenaz_build_info's one series.
func buildMetric(b BuildInfo) prometheus.Metric {
	i, _ := Lookup(NameBuildInfo)
	return prometheus.MustNewConstMetric(prometheus.NewDesc(i.Name, i.Help, i.Labels, nil), prometheus.GaugeValue, 1,
		b.Version, b.Revision, b.GoVersion)
}
