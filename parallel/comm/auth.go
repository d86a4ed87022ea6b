package comm

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
)

// The handshake proves knowledge of the shared secret without sending it: the acceptor sends
// a random nonce, the dialer answers HMAC-SHA256(secret, purpose|nonce), the acceptor answers
// one status byte. purpose separates the store from the transport's connections.

func authMAC(secret, purpose string, nonce []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write(nonce)
	return m.Sum(nil)
}

// authAccept runs the acceptor's side on a fresh connection.
func authAccept(c net.Conn, secret, purpose string) error {
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
	if !hmac.Equal(got, authMAC(secret, purpose, nonce)) {
		c.Write([]byte{0})
		return fmt.Errorf("%w: %s presented the wrong secret (GP_RDZV_SECRET)", ErrAuth, c.RemoteAddr())
	}
	_, err := c.Write([]byte{1})
	return err
}

// authDial runs the dialer's side.
func authDial(c net.Conn, secret, purpose string) error {
	nonce := make([]byte, 16)
	if _, err := io.ReadFull(c, nonce); err != nil {
		return fmt.Errorf("handshake with %s: %w", c.RemoteAddr(), err)
	}
	if _, err := c.Write(authMAC(secret, purpose, nonce)); err != nil {
		return err
	}
	ok := []byte{0}
	if _, err := io.ReadFull(c, ok); err != nil || ok[0] != 1 {
		return fmt.Errorf("%w: %s refused this process's secret (check GP_RDZV_SECRET)", ErrAuth, c.RemoteAddr())
	}
	return nil
}
