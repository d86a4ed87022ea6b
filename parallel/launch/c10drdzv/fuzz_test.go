package c10drdzv

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"testing"
)

func regJSON(t testing.TB, r registration) []byte {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMasterOf(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		port int
	}{
		{`{"id":"a","addr":"10.0.0.7:29400","nproc":2}`, "10.0.0.7", 29400},
		{`{"addr":"[::1]:5"}`, "::1", 5},
		{`{"addr":"n0:0"}`, "", 0},
		{`{"addr":"n0:x"}`, "", 0},
		{`{"addr":":29400"}`, "", 0},
		{`not json`, "", 0},
		{``, "", 0},
	} {
		host, port, err := masterOf([]byte(tc.in))
		if tc.host == "" {
			if err == nil {
				t.Errorf("masterOf(%s) = %s %d, want an error", tc.in, host, port)
			}
			continue
		}
		if err != nil || host != tc.host || port != tc.port {
			t.Errorf("masterOf(%s) = %s %d, %v; want %s %d", tc.in, host, port, err, tc.host, tc.port)
		}
	}
}

// FuzzMasterOf checks that any registration node 0 left in the store gives a host and port
// or an error, never a panic, and that an address it accepts registers back the same.
func FuzzMasterOf(f *testing.F) {
	f.Add(regJSON(f, registration{ID: "h-1-abc", Addr: "10.0.0.7:29400", NProc: 2, Command: []string{"train", "-x"}}))
	f.Add([]byte(`{"addr":"[::1]:5"}`))
	f.Add([]byte(`{"addr":7}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		host, port, err := masterOf(b)
		if err != nil {
			return
		}
		if port < 1 || port > 65535 || host == "" {
			t.Fatalf("accepted %q port %d", host, port)
		}
		h2, p2, err := masterOf(regJSON(t, registration{Addr: net.JoinHostPort(host, strconv.Itoa(port))}))
		if err != nil || h2 != host || p2 != port {
			t.Fatalf("round trip of %s:%d gave %s:%d, %v", host, port, h2, p2, err)
		}
	})
}

// FuzzAdmit checks the coordinator's decision over any registrations (joins separated by
// NUL bytes): never a panic, at most maxNodes members, no join both admitted and refused,
// and every member agreeing with the first on processes and command.
func FuzzAdmit(f *testing.F) {
	ok := regJSON(f, registration{ID: "a", Addr: "n0:1", NProc: 2, Command: []string{"p"}})
	other := regJSON(f, registration{ID: "b", Addr: "n1:1", NProc: 3, Command: []string{"p"}})
	f.Add(bytes.Join([][]byte{ok, ok, other, []byte("{"), ok}, []byte{0}), uint8(2))
	f.Add([]byte(`{"nproc":0}`), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, maxNodes uint8) {
		fin := final{Refused: map[int]string{}}
		var first registration
		for idx, b := range bytes.Split(in, []byte{0}) {
			fin.admit(&first, idx, b, int(maxNodes))
		}
		if len(fin.Members) > int(maxNodes) {
			t.Fatalf("%d members, at most %d", len(fin.Members), maxNodes)
		}
		joins := bytes.Split(in, []byte{0})
		for _, m := range fin.Members {
			if _, ok := fin.Refused[m]; ok {
				t.Fatalf("join %d both admitted and refused", m)
			}
			var reg registration
			if err := json.Unmarshal(joins[m], &reg); err != nil || reg.NProc != first.NProc || commandKey(reg.Command) != commandKey(first.Command) {
				t.Fatalf("member %d (%s) differs from the first (%+v)", m, joins[m], first)
			}
		}
	})
}
