// Package transporttest is the conformance suite every transport.Source
// passes, as every Watermill broker passes Watermill's pubsub/tests: every
// message delivered, positions that order correctly, reading from a
// position, prompt return when a context ends, Close that unblocks Fetch,
// and no goroutine left behind. What a transport cannot do it declares in
// its transport.Info, and the suite checks that instead.
package transporttest
