// Package etcdtest starts a throwaway etcd server for tests: Debian's etcd-server binary at
// /usr/bin/etcd (or $GP_ETCD), on 127.0.0.1 with ports the OS picked, data in a temporary
// directory, stopped when the test ends.
package etcdtest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Binary is the etcd server the tests run.
func Binary() string {
	if b := os.Getenv("GP_ETCD"); b != "" {
		return b
	}
	return "/usr/bin/etcd"
}

// Start runs etcd for the test and returns its client endpoint (host:port). The test is
// skipped, saying why, when the binary is absent.
func Start(t testing.TB) string {
	t.Helper()
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no etcd server at %s (install Debian's etcd-server, or set GP_ETCD): %v", bin, err)
	}
	client, peer := freePort(t), freePort(t)
	curl := fmt.Sprintf("http://127.0.0.1:%d", client)
	purl := fmt.Sprintf("http://127.0.0.1:%d", peer)
	var out bytes.Buffer
	cmd := exec.Command(bin, "--name", "gptest", "--data-dir", t.TempDir(),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "gptest="+purl, "--log-level", "error")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	addr := fmt.Sprintf("127.0.0.1:%d", client)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		select {
		case <-exited:
			t.Fatalf("etcd exited: %s", out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not listen on %s within 20s: %s", addr, out.String())
		}
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
