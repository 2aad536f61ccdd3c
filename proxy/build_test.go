package proxy

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestBuildFromBuildInformation(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	const rev = "71617413475b5615e69b7a75038fe3dd75f9ed54"
	for _, tc := range []struct {
		name              string
		info              *debug.BuildInfo
		version, revision string // the -ldflags -X fallbacks
		want              Build
	}{
		{"a tagged build says its tag and revision",
			&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.4.0"}, Settings: settings("vcs.revision", rev, "vcs.modified", "false")},
			"", "", Build{"v1.4.0", rev, "go1.26.1"}},
		{"a tree with changes is +dirty",
			&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v0.0.0-20261202071307-71617413475b+dirty"}, Settings: settings("vcs.revision", rev, "vcs.modified", "true")},
			"", "", Build{"v0.0.0-20261202071307-71617413475b+dirty", rev + "+dirty", "go1.26.1"}},
		{"the build information wins over the fallbacks",
			&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.4.0"}, Settings: settings("vcs.revision", rev)},
			"v9.9.9", "0000000", Build{"v1.4.0", rev, "go1.26.1"}},
		{"without VCS information the fallbacks stand in",
			&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}},
			"v1.4.0-3-g7161741-dirty", rev, Build{"v1.4.0-3-g7161741-dirty", rev, "go1.26.1"}},
		{"without either it says so",
			&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}},
			"", "", Build{"(devel)", "unknown", "go1.26.1"}},
		{"without build information the runtime's Go version",
			nil, "", "", Build{"(devel)", "unknown", runtime.Version()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildFrom(tc.info, tc.version, tc.revision); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
