package proxy

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Build says which build runs: `failover version`, the listening log line, the -check header
// and the failover_build_info gauge carry it, so that an operator of a :latest image can tell.
type Build struct {
	// Version is the main module's version as Go stamped it: a tag, or, built from a git
	// checkout, a pseudo-version made of the commit's time and hash (with +dirty for a tree
	// with changes). "(devel)" when there is none.
	Version string
	// Revision is the VCS revision, with "+dirty" when the tree had changes; "unknown"
	// without one.
	Revision string
	// GoVersion is the Go release that built the binary.
	GoVersion string
}

// ReadBuild reads the binary's build information (runtime/debug.ReadBuildInfo). version and
// revision stand in where it has none: the Dockerfile passes them with -ldflags -X, because
// its build context has no .git for Go to stamp from.
func ReadBuild(version, revision string) Build {
	info, _ := debug.ReadBuildInfo()
	return buildFrom(info, version, revision)
}

// buildFrom is ReadBuild with the build information passed in; info may be nil.
func buildFrom(info *debug.BuildInfo, version, revision string) Build {
	b := Build{Version: "(devel)", Revision: "unknown", GoVersion: runtime.Version()}
	if version != "" {
		b.Version = version
	}
	if revision != "" {
		b.Revision = revision
	}
	if info == nil {
		return b
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		b.Version = v
	}
	if info.GoVersion != "" {
		b.GoVersion = info.GoVersion
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		if dirty {
			rev += "+dirty"
		}
		b.Revision = rev
	}
	return b
}

// String is the one line `failover version` prints.
func (b Build) String() string {
	return fmt.Sprintf("failover %s, revision %s, %s", b.Version, b.Revision, b.GoVersion)
}
