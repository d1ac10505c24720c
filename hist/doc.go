// Package hist is a fixed-bucket histogram of durations, safe for
// concurrent use and free of allocation, for the packages that expose
// timings to package metrics without depending on Prometheus.
package hist
