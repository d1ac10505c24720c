package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

// version is set at link time by a release build
// (-ldflags "-X main.version=v1.2.3"); otherwise the module's version
// from the build information (go install ...@v1.2.3) is used.
var version = ""

// cmdVersion prints nandi's version, its commit when built from a
// checkout, and the Go that built it.
func cmdVersion(ctx context.Context, args []string, out, errOut io.Writer) int {
	f := newFlags("version", out, errOut)
	if code, ok := f.parse(args); !ok {
		return code
	}
	fmt.Fprintln(out, versionLine())
	return exitOK
}

func versionLine() string {
	v, goV, rev, dirty := version, "unknown", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		goV = bi.GoVersion
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	line := "nandi " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		line += " commit " + rev
		if dirty {
			line += "+dirty"
		}
	}
	return line + " " + goV
}
