package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nandi-go/nandi/consumer"
)

// cmdPause pauses a group (consumer.Pause): every worker finishes what
// runs and starts nothing, keeping its lease, until nandi resume.
func cmdPause(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := newFlags("pause", out, errOut)
	reason := fs.String("reason", "", "why, for nandi status and the workers' logs")
	c, group, _, code := groupArgs(ctx, fs, args, false)
	if c == nil {
		return code
	}
	defer c.Close()
	st, err := consumer.Pause(ctx, c, group, *reason)
	if err != nil {
		return fs.failed(err)
	}
	fmt.Fprintf(out, "group %s paused since %s%s: each worker finishes what runs and starts nothing within an interval, keeping its lease; nandi resume -group %s ends it\n",
		group, st.Since.Format(time.RFC3339), reasonText(st.Reason), group)
	return 0
}

// cmdResume ends a group's pause.
func cmdResume(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := newFlags("resume", out, errOut)
	c, group, _, code := groupArgs(ctx, fs, args, false)
	if c == nil {
		return code
	}
	defer c.Close()
	resumed, err := consumer.Resume(ctx, c, group)
	if err != nil {
		return fs.failed(err)
	}
	if !resumed {
		fmt.Fprintf(out, "group %s was not paused\n", group)
		return 0
	}
	fmt.Fprintf(out, "group %s resumed: each worker starts tasks again within an interval\n", group)
	return 0
}

func reasonText(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}
