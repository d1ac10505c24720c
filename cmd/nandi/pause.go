package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nandi-go/nandi/consumer"
)

// cmdPause pauses a group (consumer.Pause): every worker finishes what
// runs and starts nothing, keeping its lease, until nandi resume.
func cmdPause(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
	fs.SetOutput(errOut)
	url := fs.String("redis", "", "the group's Redis, as a URL: "+urlForms)
	group := fs.String("group", "", "the group's name (partition.Options.Name)")
	reason := fs.String("reason", "", "why, for nandi status and the workers' logs")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *group == "" || fs.NArg() > 0 {
		fmt.Fprintln(errOut, "usage: nandi pause -redis URL -group NAME [-reason TEXT]")
		return 2
	}
	c, err := connect(ctx, *url)
	if err != nil {
		fmt.Fprintln(errOut, "nandi pause:", err)
		return 2
	}
	defer c.Close()
	st, err := consumer.Pause(ctx, c, *group, *reason)
	if err != nil {
		fmt.Fprintln(errOut, "nandi pause:", err)
		return 1
	}
	fmt.Fprintf(out, "group %s paused since %s%s: each worker finishes what runs and starts nothing within an interval, keeping its lease; nandi resume -group %s ends it\n",
		*group, st.Since.Format(time.RFC3339), reasonText(st.Reason), *group)
	return 0
}

// cmdResume ends a group's pause.
func cmdResume(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	fs.SetOutput(errOut)
	url := fs.String("redis", "", "the group's Redis, as a URL: "+urlForms)
	group := fs.String("group", "", "the group's name (partition.Options.Name)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *group == "" || fs.NArg() > 0 {
		fmt.Fprintln(errOut, "usage: nandi resume -redis URL -group NAME")
		return 2
	}
	c, err := connect(ctx, *url)
	if err != nil {
		fmt.Fprintln(errOut, "nandi resume:", err)
		return 2
	}
	defer c.Close()
	resumed, err := consumer.Resume(ctx, c, *group)
	if err != nil {
		fmt.Fprintln(errOut, "nandi resume:", err)
		return 1
	}
	if !resumed {
		fmt.Fprintf(out, "group %s was not paused\n", *group)
		return 0
	}
	fmt.Fprintf(out, "group %s resumed: each worker starts tasks again within an interval\n", *group)
	return 0
}

func reasonText(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}
