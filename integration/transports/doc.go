// Package transports holds tests that read every transport side by side
// (each treats bad input alike). They import every transport's client, so
// they live here, where no user's module loads them, rather than in
// package transport, whose tests go mod tidy loads for anyone who imports
// it.
package transports
