package auth

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestHandshake runs both sides over a pipe: the handshake succeeds only when secret and
// purpose agree, and then both sides report ErrFailed.
func TestHandshake(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		acceptSecret, dialSecret   string
		acceptPurpose, dialPurpose string
		ok                         bool
	}{
		{"same secret and purpose", "s", "s", "p", "p", true},
		{"empty secrets agree", "", "", "p", "p", true},
		{"other secret", "s", "t", "p", "p", false},
		{"other purpose", "s", "s", "store", "transport", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			deadline := time.Now().Add(10 * time.Second)
			a.SetDeadline(deadline)
			b.SetDeadline(deadline)
			done := make(chan error, 1)
			go func() { done <- Challenge(a, tc.acceptSecret, tc.acceptPurpose) }()
			dialErr := Respond(b, tc.dialSecret, tc.dialPurpose)
			acceptErr := <-done
			if tc.ok {
				if dialErr != nil || acceptErr != nil {
					t.Fatalf("Respond: %v, Challenge: %v; want both nil", dialErr, acceptErr)
				}
				return
			}
			if !errors.Is(dialErr, ErrFailed) || !errors.Is(acceptErr, ErrFailed) {
				t.Fatalf("Respond: %v, Challenge: %v; want both to wrap ErrFailed", dialErr, acceptErr)
			}
		})
	}
}

// TestChallengeShortAnswer: a peer that hangs up before answering is an I/O error, not an
// authentication failure.
func TestChallengeShortAnswer(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		nonce := make([]byte, 16)
		b.Read(nonce)
		b.Write([]byte{1, 2, 3})
		b.Close()
	}()
	err := Challenge(a, "s", "p")
	if err == nil || errors.Is(err, ErrFailed) {
		t.Fatalf("Challenge after a short answer: %v; want an I/O error", err)
	}
}
