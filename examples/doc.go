// Package examples holds runnable programs, one per directory (the
// mail-sender first). Not built yet.
package examples
