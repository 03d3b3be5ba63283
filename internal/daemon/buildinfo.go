package daemon

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the version a build says it is: stamped, the one -ldflags
// set ("dev" when none was), else the module's version when built as a
// module dependency (go install ...@v1.2.3), else "dev".
func Version(stamped string) string {
	if stamped != "" && stamped != "dev" {
		return stamped
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

// revision is the VCS revision the binary was built from, "" when the
// build did not record one.
func revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return ""
}

// buildInfo is gpuscaler_build_info: always 1, its labels saying what
// runs.
func buildInfo(version string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "gpuscaler_build_info",
		Help:        "What runs: always 1, with the version, the VCS revision and the Go version in its labels.",
		ConstLabels: prometheus.Labels{"version": Version(version), "revision": revision(), "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}
