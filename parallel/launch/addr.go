package launch

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
)

// What every rendezvous backend needs to advertise a node and name it: shared here so that
// gprun's own defaults and the etcd and c10d backends pick addresses, ports and ids alike.

// RouteAddr returns this host's address on the route to endpoint ("host:port"), the address
// the endpoint's peers can reach it at; no packet is sent. It is 127.0.0.1 when the endpoint
// does not resolve.
func RouteAddr(endpoint string) string {
	c, err := net.Dial("udp", endpoint)
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

// FreePort returns a TCP port of host that was free a moment ago (for a master port the
// node chooses itself).
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("picking a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RandomHex returns 2n random hexadecimal digits (run ids, secrets, node ids).
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
