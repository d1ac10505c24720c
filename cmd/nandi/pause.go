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
	reason := fs.String("reason", "", "why, for nandi status and the workers' logs (a second pause replaces it)")
	create := fs.Bool("create", false, "pause a group that has none of its keys yet (before its first start); without it a name no group has is refused")
	c, group, _, code := groupArgs(ctx, fs, args, false)
	if c == nil {
		return code
	}
	defer c.Close()
	if !*create {
		if err := checkGroup(ctx, c, group); err != nil {
			return fs.failed(err)
		}
	}
	was, paused, err := consumer.ReadPause(ctx, c, group)
	if err != nil {
		return fs.failed(err)
	}
	st, err := consumer.Pause(ctx, c, group, *reason)
	if err != nil {
		return fs.failed(err)
	}
	switch {
	case !paused:
		fmt.Fprintf(out, "group %s paused since %s%s: each worker finishes what runs and starts nothing within an interval, keeping its lease; nandi resume -group %s ends it\n",
			group, st.Since.Format(time.RFC3339), reasonText(st.Reason), group)
	case was.Reason != st.Reason:
		fmt.Fprintf(out, "group %s was already paused since %s; its reason is now %q (was %q)\n", group, st.Since.Format(time.RFC3339), st.Reason, was.Reason)
	default:
		fmt.Fprintf(out, "group %s was already paused since %s%s; nothing changed\n", group, st.Since.Format(time.RFC3339), reasonText(st.Reason))
	}
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
	if err := checkGroup(ctx, c, group); err != nil {
		return fs.failed(err)
	}
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
