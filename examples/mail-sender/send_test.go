package main

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// smtpPeer is a minimal SMTP server for one connection: it answers DATA's
// end with dataReply and hands over what it received; with hangUp it then
// closes the connection instead of answering QUIT.
func smtpPeer(t *testing.T, dataReply string, hangUp bool) (addr string, received <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		r := bufio.NewReader(conn)
		reply := func(s string) { _, _ = conn.Write([]byte(s + "\r\n")) }
		reply("220 localhost ESMTP")
		var data strings.Builder
		inData := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if inData {
				if line != ".\r\n" {
					data.WriteString(line)
					continue
				}
				inData = false
				reply(dataReply)
				got <- data.String()
				if hangUp {
					return
				}
				continue
			}
			switch strings.ToUpper(strings.Fields(line)[0]) {
			case "EHLO", "HELO":
				reply("250 localhost")
			case "MAIL", "RCPT":
				reply("250 2.1.0 ok")
			case "DATA":
				reply("354 go ahead")
				inData = true
			case "QUIT":
				reply("221 bye")
				return
			default:
				reply("502 no")
			}
		}
	}()
	return ln.Addr().String(), got
}

// A mail is sent once the server has accepted its DATA: what happens after
// (here the server hangs up instead of answering QUIT, as a context ending
// between DATA's reply and QUIT does) is past the effect boundary and must
// not make the task fail, or it is done again and the mail sent twice.
// Before the fix, send returned QUIT's error here.
func TestSendIsDoneOnceDataIsAccepted(t *testing.T) {
	addr, received := smtpPeer(t, "250 2.0.0 queued", true)
	if err := send(context.Background(), addr, &transport.Message{Key: "7", Payload: []byte("hello")}); err != nil {
		t.Fatalf("send = %v after the server accepted DATA; want nil: the mail is sent, and an error would send it again", err)
	}
	select {
	case got := <-received:
		if !strings.Contains(got, messageID("7")) {
			t.Fatalf("the server received %q; want the mail with Message-Id %s", got, messageID("7"))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server never received the mail")
	}
}

// A mail the server refuses at DATA is not sent: send reports it, so the
// task is retried.
func TestSendFailsWhenDataIsRefused(t *testing.T) {
	addr, _ := smtpPeer(t, "451 4.3.0 try again later", false)
	err := send(context.Background(), addr, &transport.Message{Key: "8", Payload: []byte("x")})
	if err == nil || !strings.Contains(err.Error(), "451") {
		t.Fatalf("send = %v; want the server's 451 refusal", err)
	}
}
