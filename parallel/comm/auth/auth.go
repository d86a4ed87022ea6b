// Package auth authenticates a fresh connection between two processes of one job with the
// job's rendezvous secret, without sending the secret: the accepting side sends a random
// nonce ([Challenge]), the connecting side answers HMAC-SHA256(secret, purpose|nonce)
// ([Respond]), and the accepting side answers one status byte. Both sides name the same
// purpose, which separates the connections of different protocols (the rendezvous store's,
// a transport's) so that an answer to one is worth nothing to the other.
//
// Run it first thing on a new connection, under a deadline: a stranger on the port can
// otherwise hold the accepting side in its read. The secret protects against strangers on
// the network, not against a process that can read the job's environment.
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
)

// SecretEnv names the environment variable holding the job's rendezvous secret: a launcher
// (gprun) sets it for its workers, and the store and the transports use it when no secret is
// given explicitly. An empty secret is a valid, shared, secret: it only keeps out peers that
// set a different one.
const SecretEnv = "GP_RDZV_SECRET"

// Secret returns the value of SecretEnv ("" when unset).
func Secret() string { return os.Getenv(SecretEnv) }

// ErrFailed is wrapped by the errors of Challenge and Respond when the two sides' secrets
// differ (the message says which side refused whom). Other errors are I/O errors.
var ErrFailed = errors.New("auth: authentication failed")

// Challenge runs the accepting side of the handshake on the fresh connection c: it returns
// nil once the peer proved it knows secret for purpose, an error wrapping ErrFailed when it
// answered with another secret, or the I/O error that ended the exchange. It does not close
// c and sets no deadline of its own.
func Challenge(c net.Conn, secret, purpose string) error {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	if _, err := c.Write(nonce); err != nil {
		return err
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("reading handshake from %s: %w", c.RemoteAddr(), err)
	}
	if !hmac.Equal(got, mac(secret, purpose, nonce)) {
		c.Write([]byte{0})
		return fmt.Errorf("%w: %s presented the wrong secret (%s)", ErrFailed, c.RemoteAddr(), SecretEnv)
	}
	_, err := c.Write([]byte{1})
	return err
}

// Respond runs the connecting side of the handshake on the fresh connection c: it answers
// the peer's challenge with secret for purpose and returns nil once the peer accepted it, an
// error wrapping ErrFailed when the peer refused it, or the I/O error that ended the
// exchange. It does not close c and sets no deadline of its own.
func Respond(c net.Conn, secret, purpose string) error {
	nonce := make([]byte, 16)
	if _, err := io.ReadFull(c, nonce); err != nil {
		return fmt.Errorf("handshake with %s: %w", c.RemoteAddr(), err)
	}
	if _, err := c.Write(mac(secret, purpose, nonce)); err != nil {
		return err
	}
	ok := []byte{0}
	if _, err := io.ReadFull(c, ok); err != nil || ok[0] != 1 {
		return fmt.Errorf("%w: %s refused this process's secret (check %s)", ErrFailed, c.RemoteAddr(), SecretEnv)
	}
	return nil
}

// mac is the answer to nonce: HMAC-SHA256 over purpose, a zero byte and nonce.
func mac(secret, purpose string, nonce []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write(nonce)
	return m.Sum(nil)
}
