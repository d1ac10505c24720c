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

// A mail is sent once the server has accepted its DATA: what happens after
// (here the server hangs up instead of answering QUIT, as a context ending
// between DATA's reply and QUIT does) is past the effect boundary and must
// not make the task fail, or it is done again and the mail sent twice.
// Before the fix, send returned QUIT's error here.
func TestSendIsDoneOnceDataIsAccepted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan string, 1)
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
				if line == ".\r\n" {
					reply("250 2.0.0 queued")
					accepted <- data.String()
					return // hang up before QUIT
				}
				data.WriteString(line)
				continue
			}
			switch cmd := strings.ToUpper(strings.Fields(line)[0]); cmd {
			case "EHLO", "HELO":
				reply("250 localhost")
			case "MAIL", "RCPT":
				reply("250 2.1.0 ok")
			case "DATA":
				reply("354 go ahead")
				inData = true
			default:
				reply("502 no")
			}
		}
	}()
	m := &transport.Message{Key: "7", Payload: []byte("hello")}
	if err := send(context.Background(), ln.Addr().String(), m); err != nil {
		t.Fatalf("send = %v after the server accepted DATA; want nil: the mail is sent, and an error would send it again", err)
	}
	select {
	case got := <-accepted:
		if !strings.Contains(got, messageID("7")) {
			t.Fatalf("the server received %q; want the mail with Message-Id %s", got, messageID("7"))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server never accepted the mail")
	}
}

// A mail the server refuses at DATA is not sent: send reports it, so the
// task is retried.
func TestSendFailsWhenDataIsRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
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
		inData := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if inData {
				if line == ".\r\n" {
					reply("451 4.3.0 try again later")
					inData = false
				}
				continue
			}
			switch strings.ToUpper(strings.Fields(line)[0]) {
			case "EHLO", "HELO":
				reply("250 localhost")
			case "MAIL", "RCPT":
				reply("250 ok")
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
	err = send(context.Background(), ln.Addr().String(), &transport.Message{Key: "8", Payload: []byte("x")})
	if err == nil || !strings.Contains(err.Error(), "451") {
		t.Fatalf("send = %v; want the server's 451 refusal", err)
	}
}
