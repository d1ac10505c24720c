package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The CLI's conventions, one place for every command:
//
//   - help (-h, -help, --help, nandi help CMD) goes to stdout and exits 0;
//   - a usage error (an unknown flag, a bad value, an argument left over,
//     a required flag missing) says what is wrong on stderr, with the
//     command's synopsis, and exits 2;
//   - a failure (Redis unreachable, a refused change, a plan that does not
//     fit) says so in one line on stderr and exits 1;
//   - -redis defaults to $NANDI_REDIS_URL, else $REDIS_URL.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	envRedisURL = "NANDI_REDIS_URL"
)

// A command of the CLI: its name ("dead list"), synopsis and what it does.
type command struct {
	name, synopsis, summary string
	run                     func(ctx context.Context, args []string, out, errOut io.Writer) int
}

// commands in the order nandi help lists them.
var commands []command

func init() {
	commands = []command{
		{"groups", "-redis URL [-json]", "every group on the Redis: workers, replicas, lag, paused, dead letters", cmdGroups},
		{"status", "-redis URL -group NAME [-json]", "the group's settings, counts, generation, workers and checkpoints", cmdStatus},
		{"watch", "-redis URL -group NAME", "the same, one line per interval, until interrupted", cmdWatch},
		{"plan", "[-interval 5s] [-gap 0.125] [-rtt 1ms] [-jitter 0] [-workers 10] [-shards S] [-worker-rate N [-drain 30s]] [-redis URL]", "what the settings cost, and whether they fit the network", cmdPlan},
		{"pause", "-redis URL -group NAME [-reason TEXT]", "every worker finishes what runs and starts nothing, keeping its lease", cmdPause},
		{"resume", "-redis URL -group NAME", "end the pause", cmdResume},
		{"dead list", "-redis URL -group NAME [-stream DEAD] [-from ID] [-until ID] [-count N] [-json]", "the group's dead letters", nil},
		{"dead show", "-redis URL -group NAME [-stream DEAD] [-json] ID", "one dead letter whole: key, payload, headers, error, attempts, worker, term, source, time", nil},
		{"dead replay", "-redis URL -group NAME [-stream DEAD] [-to S0,S1,... [-create] [-unaligned]] (-id ID,... | -all [-from ID] [-until ID])", "put dead letters back where they came from (or on -to's streams)", nil},
		{"checkpoint reset", "-redis URL -group NAME -to start|end|time:T|POSITION [-streams S,...] [-dry-run]", "move a stopped group's checkpoints (a new epoch); -dry-run says what it would redo or skip, also while the group runs", nil},
		{"web", "[-redis URL] [-addr 127.0.0.1:8080] [-group NAME] [-read-only] [-tls-cert F -tls-key F] [-tls-proxy]", "a live page per group that can pause, resume and handle dead letters (-read-only: only shows; beyond localhost only with $" + EnvWebToken + ")", cmdWeb},
		{"scaler", "-redis URL [-log-redis URL] [-kafka BROKERS] [-nats URL] [-addr 127.0.0.1:9108] [-group G,...]", "each group's backlog in entries, from the ledger and the log, for KEDA (GET /keda/GROUP) and Prometheus (/metrics)", cmdScaler},
		{"version", "", "nandi's version, and the Go that built it", cmdVersion},
		{"help", "[COMMAND]", "this, or a command's flags", nil},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// usage is nandi's help: every command, then the URL forms and the
// environment.
func usage() string {
	var b strings.Builder
	b.WriteString("nandi: look at and operate a group of nandi workers\n\nusage:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  nandi %s %s\n        %s\n", c.name, c.synopsis, c.summary)
	}
	b.WriteString("\nURL: redis://host:port[/db] (a server or any Cluster node), redis+cluster://host:port,\n" +
		"     redis+sentinel://sentinel:26379?master_name=NAME[&addr=sentinel2:26379]; rediss for TLS\n" +
		"environment: " + envRedisURL + " (else REDIS_URL) is -redis's default; " + EnvWebToken + " is web's token\n" +
		"exit status: 0 done, 1 failed (Redis unreachable, a refused change, a plan that does not fit), 2 usage error\n" +
		"nandi help COMMAND (or nandi COMMAND -h) shows a command's flags.\n")
	return b.String()
}

// flags is a command's flag set with the CLI's conventions.
type flags struct {
	*flag.FlagSet
	cmd         command
	out, errOut io.Writer
}

// newFlags returns the flag set of the command named name.
func newFlags(name string, out, errOut io.Writer) *flags {
	c, _ := lookup(name)
	if c.name == "" {
		c.name = name
	}
	fs := flag.NewFlagSet("nandi "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse says flag's errors itself, as the command's
	f := &flags{FlagSet: fs, cmd: c, out: out, errOut: errOut}
	fs.Usage = func() {} // parse prints help or the synopsis itself
	return f
}

// parse parses args. ok is false when the command must return code at
// once: exitOK after help (on stdout), exitUsage after an unknown flag, a
// bad value or an argument left over (said on stderr, with the synopsis).
func (f *flags) parse(args []string) (code int, ok bool) { return f.parseArgs(args, "") }

// parseArgs is parse for a command that takes one argument after its
// flags, named what ("" for none): missing or extra, it is a usage error.
func (f *flags) parseArgs(args []string, what string) (code int, ok bool) {
	err := f.Parse(args)
	want := 0
	if what != "" {
		want = 1
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		f.help(f.out)
		return exitOK, false
	case err != nil: // flag's error, as the command's: "nandi status: flag provided but not defined: -bogus"
		return f.usageError("%v", err), false
	case f.NArg() > want:
		if want == 0 {
			return f.usageError("unexpected argument %q: this command takes flags only (nandi help %s)", f.Arg(want), f.cmd.name), false
		}
		return f.usageError("unexpected argument %q after the %s: the flags go before it (nandi help %s)", f.Arg(want), what, f.cmd.name), false
	case f.NArg() < want:
		return f.usageError("give %s, after the flags", what), false
	}
	return exitOK, true
}

// help prints the command's synopsis, what it does and its flags.
func (f *flags) help(w io.Writer) {
	fmt.Fprintf(w, "usage: nandi %s %s\n  %s\n", f.cmd.name, f.cmd.synopsis, f.cmd.summary)
	n := 0
	f.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nflags:")
		f.SetOutput(w)
		f.PrintDefaults()
		f.SetOutput(io.Discard)
	}
}

// usageError says what is wrong with the command line, and the
// synopsis, on stderr; it returns exitUsage.
func (f *flags) usageError(format string, a ...any) int {
	fmt.Fprintf(f.errOut, "nandi %s: %s\n", f.cmd.name, fmt.Sprintf(format, a...))
	return f.synopsis()
}

func (f *flags) synopsis() int {
	fmt.Fprintf(f.errOut, "usage: nandi %s %s (nandi help %s for the flags)\n", f.cmd.name, f.cmd.synopsis, f.cmd.name)
	return exitUsage
}

// failed says err on stderr in one line, as the command's, and returns
// exitFailed.
func (f *flags) failed(err error) int {
	fmt.Fprintf(f.errOut, "nandi %s: %s\n", f.cmd.name, oneLine(err.Error()))
	return exitFailed
}

// redisURL defines -redis, with its default from the environment.
func (f *flags) redisURL(what string) *string {
	def, from := redisFromEnv()
	help := what + ", as a URL: " + urlForms
	if from != "" {
		help += " (default from $" + from + ")"
	} else {
		help += " (default $" + envRedisURL + ", else $REDIS_URL)"
	}
	return f.String("redis", def, help)
}

// redisFromEnv returns -redis's default and the variable it came from.
func redisFromEnv() (url, from string) {
	for _, k := range []string{envRedisURL, "REDIS_URL"} {
		if v := os.Getenv(k); v != "" {
			return v, k
		}
	}
	return "", ""
}

// printJSON prints v as indented JSON (every key snake_case) and returns
// exitOK.
func printJSON(out io.Writer, v any) int {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	return exitOK
}

// plural is n and word, with an s unless n is 1: "1 worker", "3 workers".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// oneLine keeps an error to one line: a server's multi-line answer or a
// wrapped stack would break a script's parsing of stderr.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// cmdHelp prints nandi's help, or a command's: its synopsis and flags.
func cmdHelp(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		args = nil // help's own help is nandi's
	}
	if len(args) == 0 {
		fmt.Fprint(out, usage())
		return exitOK
	}
	name := strings.Join(args, " ")
	if _, ok := lookup(name); !ok && len(args) == 1 {
		// "nandi help dead": the subcommands of dead.
		var subs []string
		for _, c := range commands {
			if strings.HasPrefix(c.name, name+" ") {
				subs = append(subs, "  nandi "+c.name+" "+c.synopsis+"\n        "+c.summary)
			}
		}
		if len(subs) > 0 {
			fmt.Fprintf(out, "usage:\n%s\n", strings.Join(subs, "\n"))
			return exitOK
		}
	}
	if _, ok := lookup(name); !ok || name == "help" {
		if name == "help" {
			fmt.Fprint(out, usage())
			return exitOK
		}
		fmt.Fprintf(errOut, "nandi help: unknown command %q%s\n%s", name, suggest(name), usage())
		return exitUsage
	}
	return run(ctx, append(args, "-h"), out, errOut)
}

// suggest names the command closest to a mistyped one, if any.
func suggest(name string) string {
	for _, c := range commands {
		head, _, _ := strings.Cut(c.name, " ")
		if strings.HasPrefix(head, name) || strings.HasPrefix(name, head) {
			return "; did you mean " + head + "?"
		}
	}
	return ""
}
