package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The example with no flags: every order's events once each and in
// order, the poisoned event read back from the poison topic, the
// transient failures retried in place, both routers serving.
func TestRunsWithNoFlags(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, "", 60); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		"retried in place: 6 transient failures",
		"all 60 orders' events handled once each, in order per order",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
	// Three attempts a delivery (the Retry middleware's 2 retries): 3,
	// or 6 when the group changed during them on a busy machine (the
	// event failed, nothing was done, and the next holder tries it again).
	m := regexp.MustCompile(`poisoned: order 13 "paid" after (\d+) attempts: card declined`).FindStringSubmatch(out.String())
	if m == nil {
		t.Errorf("the output lacks the poisoned order 13:\n%s", out.String())
	} else if n, _ := strconv.Atoi(m[1]); n == 0 || n%3 != 0 {
		t.Errorf("order 13 poisoned after %d attempts; want a multiple of 3 (one delivery's, or two across a change of the group):\n%s", n, out.String())
	}
	if strings.Contains(out.String(), "handled 0 events") {
		t.Errorf("a router handled nothing: the group did not split the topic\n%s", out.String())
	}
}
