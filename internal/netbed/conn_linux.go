//go:build linux

package netbed

import (
	"context"
	"net"
	"strconv"
)

// Listen opens a TCP listener on host i's address and port (0: any free port) from inside
// the calling process: the socket belongs to host i's namespace, so the bed's links (rate,
// delay, faults) apply to its connections. The caller closes it.
func (b *Bed) Listen(i, port int) (net.Listener, error) {
	var l net.Listener
	err := inNamespace(b.Namespace(i), func() (err error) {
		l, err = net.Listen("tcp4", net.JoinHostPort(b.Addr(i), strconv.Itoa(port)))
		return err
	})
	return l, err
}

// Dial connects from host i to addr ("10.213.0.2:port") over TCP from inside the calling
// process, as Listen does; ctx bounds the connect. The caller closes the connection.
func (b *Bed) Dial(ctx context.Context, i int, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNamespace(b.Namespace(i), func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp4", addr)
		return err
	})
	return c, err
}
