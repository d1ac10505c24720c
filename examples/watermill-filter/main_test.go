package main

import (
	"bytes"
	"context"
	"testing"
)

func TestRunsWithNoFlags(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, "", 100); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
}
