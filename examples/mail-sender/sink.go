package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"sync"

	"github.com/emersion/go-smtp"
)

// sink is a local SMTP server that really receives the mails and counts
// each Message-Id it sees.
type sink struct {
	srv *smtp.Server
	ln  net.Listener

	mu       sync.Mutex
	received map[string]int
}

func startSink() (*sink, error) { return startSinkOn("127.0.0.1:0") }

// startSinkOn starts a sink listening on addr.
func startSinkOn(addr string) (*sink, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &sink{ln: ln, received: map[string]int{}}
	s.srv = smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &session{s: s}, nil }))
	s.srv.Domain = "localhost"
	s.srv.AllowInsecureAuth = true
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *sink) addr() string { return s.ln.Addr().String() }

func (s *sink) close() { _ = s.srv.Close() }

// counts returns how many times each Message-Id arrived.
func (s *sink) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.received))
	for k, v := range s.received {
		out[k] = v
	}
	return out
}

// summary says how many mails arrived, how many distinct, and how many
// more than once.
func (s *sink) summary() string {
	total, twice := 0, 0
	c := s.counts()
	for _, n := range c {
		total += n
		if n > 1 {
			twice++
		}
	}
	return fmt.Sprintf("received %d mails, %d distinct, %d more than once", total, len(c), twice)
}

type session struct{ s *sink }

func (*session) Reset()                               {}
func (*session) Logout() error                        { return nil }
func (*session) Mail(string, *smtp.MailOptions) error { return nil }
func (*session) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (ss *session) Data(r io.Reader) error {
	h, err := textproto.NewReader(bufio.NewReader(r)).ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, _ = io.Copy(io.Discard, r)
	id := h.Get("Message-Id")
	if id == "" {
		return errors.New("no Message-Id")
	}
	ss.s.mu.Lock()
	ss.s.received[id]++
	ss.s.mu.Unlock()
	return nil
}
