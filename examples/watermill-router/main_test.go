package main

import (
	"bytes"
	"context"
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
		`poisoned: order 13 "paid" after 3 attempts: card declined`,
		"all 60 orders' events handled once each, in order per order",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "handled 0 events") {
		t.Errorf("a router handled nothing: the group did not split the topic\n%s", out.String())
	}
}
