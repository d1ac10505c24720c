package consumer

import (
	"testing"
	"unsafe"
)

// A task waiting light costs its task and its slot in its id's queue,
// whatever its payload: the figure the documentation of
// Options.MaxWaiting states (WaitingTaskBytes).
func TestWaitingTaskBytes(t *testing.T) {
	got := int(unsafe.Sizeof(task{})) + int(unsafe.Sizeof((*task)(nil)))
	if got != WaitingTaskBytes {
		t.Fatalf("a light task costs %d bytes; the documentation says %d: update WaitingTaskBytes and the docs", got, WaitingTaskBytes)
	}
	t.Logf("figures: a task waiting light costs %d bytes (task %d + queue slot %d)", got, unsafe.Sizeof(task{}), unsafe.Sizeof((*task)(nil)))
}
