// Package diagrams draws the guide's pictures (docs/img/*.svg) from code:
// a group sharing a stream, the interval timeline with registrations,
// leases and a handover, a handover, and the checkpoint ledger's marks
// on a log. The SVGs in docs/img are what Draw returns; the test fails when
// they differ (regenerate with go generate ./internal/diagrams), so the
// pictures change only with their source.
package diagrams

//go:generate go run ./cmd/gen ../../docs/img
