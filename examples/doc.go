// Package examples holds runnable programs, each a main package below this
// directory that runs with `go run` and no flags:
//
//   - mail-sender: the demo. An outbox of mails in a Redis stream, sent
//     over SMTP by a fleet that scales 3 -> 6 -> 2 while it works, and a
//     report of what the SMTP sink received (every mail exactly once).
package examples
