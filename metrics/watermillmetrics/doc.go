// Package watermillmetrics exports a watermillfilter.Filter's figures to
// Prometheus, on a registry you pass. It is its own package so that
// importing package metrics never pulls Watermill into a build.
//
//	reg := prometheus.NewRegistry()
//	_ = metrics.RegisterLease(reg, lease, metrics.Options{})
//	_ = watermillmetrics.Register(reg, filter, metrics.Options{})
//
// Series (with the group label and metrics.Options' constant labels):
//
//	nandi_filter_messages_total{outcome}   counter  handled, failed, not_owned, lost_unowned
//	nandi_filter_panics_total              counter  handler panics recovered (each is also failed)
//	nandi_filter_overdue_handlers_total    counter  handlers still running when their term's deadline passed
//	nandi_filter_in_flight                 gauge    handlers running now
package watermillmetrics
