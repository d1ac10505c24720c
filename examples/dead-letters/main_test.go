package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// With no flags: 3 of 20 orders dead-lettered after 3 attempts each,
// listed with where they came from, replayed there once the handler is
// fixed, every order handled, no letter left.
func TestDrillWithNoFlags(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, "", false, 20); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"handled 17 orders; 3 dead letters in {dead-letters}:dead", "3 attempts  from orders at",
		"header tenant=acme", "replayed 3 letters to where they came from; every order handled (20), 0 letters left"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the drill's output lacks %q:\n%s", want, out.String())
		}
	}
}
