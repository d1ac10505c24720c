package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
)

// The page's actions: pause and resume the group, read, replay or delete
// a dead letter. Each is a POST (reading a letter is a GET) behind the
// token when there is one (guard), and passes a CSRF check: the request
// comes from this server's own page (its Origin, or Sec-Fetch-Site
// same-origin) and carries the session's CSRF token (X-Nandi-CSRF) equal
// to the session cookie the page was given (/api/session); a script that
// sends the token as Authorization: Bearer needs neither. With
// -read-only there are no actions: the page shows none, and the server
// refuses them (403).

// csrfHeader carries the session's CSRF token on every action.
const csrfHeader = "X-Nandi-CSRF"

// csrfCookie holds it in the browser (HttpOnly: the page reads the token
// from /api/session, which another origin cannot read).
const csrfCookie = "nandi_csrf"

// Session is what /api/session tells the page.
type Session struct {
	ReadOnly bool   `json:"read_only"`
	CSRF     string `json:"csrf,omitempty"`
}

// session gives the page its CSRF token (a new session's cookie, or the
// one it has) and says whether actions are allowed.
func (s *webServer) session(w http.ResponseWriter, r *http.Request) {
	if s.readOnly {
		writeJSON(w, Session{ReadOnly: true})
		return
	}
	tok := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		tok = c.Value
	} else {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		tok = hex.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: "/", HttpOnly: true, Secure: r.TLS != nil || s.tlsProxy, SameSite: http.SameSiteStrictMode})
	}
	writeJSON(w, Session{CSRF: tok})
}

// action wraps an action's handler: refused in read-only mode, and
// unless the request is the page's own (same origin, the session's CSRF
// token).
func (s *webServer) action(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.readOnly {
			http.Error(w, "nandi web: this server is read-only (-read-only): it takes no action", http.StatusForbidden)
			return
		}
		// A script that sends the token in Authorization (guard checked it)
		// is no cross-site request: a browser never adds that header by
		// itself. A request that relies on the cookie must be the page's.
		bearer := s.token != "" && s.match(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		if !bearer {
			if err := s.sameOrigin(r); err != nil {
				http.Error(w, "nandi web: "+err.Error(), http.StatusForbidden)
				return
			}
			c, err := r.Cookie(csrfCookie)
			given := r.Header.Get(csrfHeader)
			if err != nil || given == "" || !subtleEqual(given, c.Value) {
				http.Error(w, "nandi web: the request lacks this page's CSRF token (reload the page)", http.StatusForbidden)
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
		defer cancel()
		if g := r.PathValue("group"); g != "" {
			var none *noSuchGroup
			if err := checkGroup(ctx, s.c, g); errors.As(err, &none) {
				http.Error(w, "nandi web: "+err.Error(), http.StatusNotFound)
				return
			} else if err != nil {
				http.Error(w, "nandi web: "+err.Error(), http.StatusBadGateway)
				return
			}
		}
		h(w, r.WithContext(ctx))
	}
}

// sameOrigin checks that a request comes from this server's own page: an
// Origin naming the request's host, or, without one, Sec-Fetch-Site
// same-origin.
func (s *webServer) sameOrigin(r *http.Request) error {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Errorf("a request from %q is not this page's (%s)", o, r.Host)
		}
		return nil
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "same-origin":
		return nil
	case "":
		return errors.New("a request that does not say it comes from this page (no Origin, no Sec-Fetch-Site)")
	default:
		return fmt.Errorf("a request from another page (Sec-Fetch-Site: %s, no Origin): only this page's own requests act", site)
	}
}

// pause pauses the group (consumer.Pause) with the reason given.
func (s *webServer) pause(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reason string `json:"reason"`
	}
	_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body)
	reason := strings.TrimSpace(body.Reason)
	if reason == "" {
		reason = "paused from nandi web"
	}
	st, err := consumer.Pause(r.Context(), s.c, r.PathValue("group"), reason)
	if err != nil {
		http.Error(w, "nandi web: pausing: "+err.Error(), http.StatusBadGateway)
		return
	}
	s.kick(r.PathValue("group"))
	writeJSON(w, map[string]any{"paused": true, "since": st.Since, "reason": st.Reason})
}

// resume ends the group's pause.
func (s *webServer) resume(w http.ResponseWriter, r *http.Request) {
	was, err := consumer.Resume(r.Context(), s.c, r.PathValue("group"))
	if err != nil {
		http.Error(w, "nandi web: resuming: "+err.Error(), http.StatusBadGateway)
		return
	}
	s.kick(r.PathValue("group"))
	writeJSON(w, map[string]any{"paused": false, "was_paused": was})
}

// LetterView is one dead letter as the page shows it: the letter, and
// its payload as text (UTF-8) or hex.
type LetterView struct {
	deadletter.Letter
	PayloadText string `json:"payload_text"`
	PayloadForm string `json:"payload_form"` // "text" or "hex"
}

// letter answers one dead letter whole.
func (s *webServer) letter(w http.ResponseWriter, r *http.Request) {
	l, ok := s.findLetter(w, r)
	if !ok {
		return
	}
	text, form := payloadText(l.Payload)
	writeJSON(w, LetterView{Letter: l, PayloadText: text, PayloadForm: form})
}

// findLetter reads the letter the path names; it has answered when not
// ok.
func (s *webServer) findLetter(w http.ResponseWriter, r *http.Request) (deadletter.Letter, bool) {
	group, id := r.PathValue("group"), r.PathValue("id")
	ls, err := deadletter.List(r.Context(), s.c, deadletter.Stream(group), id, id, 1)
	if err != nil {
		http.Error(w, "nandi web: reading the letter: "+err.Error(), http.StatusBadGateway)
		return deadletter.Letter{}, false
	}
	if len(ls) == 0 || ls[0].ID != id {
		http.Error(w, fmt.Sprintf("nandi web: no letter %s in %s", id, deadletter.Stream(group)), http.StatusNotFound)
		return deadletter.Letter{}, false
	}
	return ls[0], true
}

// replayLetter puts a letter's task back on the Redis stream it came
// from and deletes the letter (deadletter.ReplayEach).
func (s *webServer) replayLetter(w http.ResponseWriter, r *http.Request) {
	l, ok := s.findLetter(w, r)
	if !ok {
		return
	}
	if l.Source == "" || l.System != "redis" {
		http.Error(w, fmt.Sprintf("nandi web: letter %s came from %q %q, not a Redis stream it names: replay it with nandi dead replay -to, or deadletter.ReplayEach", l.ID, l.System, l.Source), http.StatusConflict)
		return
	}
	if len(missingStreams(r.Context(), s.c, []string{l.Source})) > 0 {
		http.Error(w, fmt.Sprintf("nandi web: the letter's stream %s is gone: replay it with nandi dead replay -to ... -create", l.Source), http.StatusConflict)
		return
	}
	_, err := deadletter.ReplayEach(r.Context(), s.c, deadletter.Stream(r.PathValue("group")), []deadletter.Letter{l}, toSource(s.c))
	if err != nil {
		http.Error(w, "nandi web: "+err.Error(), http.StatusBadGateway)
		return
	}
	s.kick(r.PathValue("group"))
	writeJSON(w, map[string]any{"replayed": l.ID, "to": l.Source})
}

// deleteLetter removes a letter without replaying it.
func (s *webServer) deleteLetter(w http.ResponseWriter, r *http.Request) {
	group, id := r.PathValue("group"), r.PathValue("id")
	n, err := deadletter.Delete(r.Context(), s.c, deadletter.Stream(group), id)
	if err != nil {
		http.Error(w, "nandi web: "+err.Error(), http.StatusBadGateway)
		return
	}
	if n == 0 {
		http.Error(w, fmt.Sprintf("nandi web: no letter %s in %s", id, deadletter.Stream(group)), http.StatusNotFound)
		return
	}
	s.kick(group)
	writeJSON(w, map[string]any{"deleted": id})
}

// kick makes the group's poller read it again soon, so that the page
// shows what an action changed within a moment.
func (s *webServer) kick(group string) {
	s.mu.Lock()
	tk := s.trackers[group]
	s.mu.Unlock()
	if tk != nil {
		select {
		case tk.kick <- struct{}{}:
		default:
		}
	}
}

// actionTimeout bounds an action's Redis calls.
const actionTimeout = 10 * time.Second
