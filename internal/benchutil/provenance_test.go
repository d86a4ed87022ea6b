package benchutil

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestCommand(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"amp", nil, "go run ./bench/amp"},
		{"models", []string{"-threads", "1,2", "-out", "/tmp/m.json"}, "go run ./bench/models -threads 1,2 -out /tmp/m.json"},
		{"fuzz", []string{"-run", "Fuzz.*Read$", "-fuzztime=5m"}, "go run ./bench/fuzz -run 'Fuzz.*Read$' -fuzztime=5m"},
		{"netbed", []string{"-o", "a b", "-python", ""}, "go run ./bench/netbed -o 'a b' -python ''"},
		{"x", []string{"it's"}, `go run ./bench/x 'it'\''s'`},
	} {
		if got := Command(c.name, c.args); got != c.want {
			t.Errorf("Command(%q, %q) = %q, want %q", c.name, c.args, got, c.want)
		}
	}
}

func TestProvenanceJSON(t *testing.T) {
	p := Start("ops", []string{"-reps", "1"})
	if p.Command != "go run ./bench/ops -reps 1" || p.Machine.Cores < 1 {
		t.Fatalf("Start = %+v", p)
	}
	for _, c := range []struct {
		name    string
		end     float64
		wantEnd bool
	}{{"no end load", 0, false}, {"end load", 1.5, true}} {
		p.LoadEnd = c.end
		b, err := json.Marshal(Rows[struct {
			X int `json:"x"`
		}]{Provenance: p, Rows: []struct {
			X int `json:"x"`
		}{{1}, {2}}})
		if err != nil {
			t.Fatal(err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(b, &top); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"command", "machine", "rows"} {
			if top[k] == nil {
				t.Errorf("%s: %s has no top-level %q", c.name, b, k)
			}
		}
		if _, ok := top["load_avg_1m_end"]; ok != c.wantEnd {
			t.Errorf("%s: load_avg_1m_end present %v, want %v: %s", c.name, ok, c.wantEnd, b)
		}
		if strings.Contains(string(b), `"units"`) {
			t.Errorf("%s: empty units written: %s", c.name, b)
		}
		doc := map[string]any{}
		p.Set(doc)
		if doc["command"] != p.Command || !reflect.DeepEqual(doc["machine"], p.Machine) {
			t.Errorf("%s: Set wrote %v", c.name, doc)
		}
		if _, ok := doc["load_avg_1m_end"]; ok != c.wantEnd {
			t.Errorf("%s: Set load_avg_1m_end present %v, want %v", c.name, ok, c.wantEnd)
		}
	}
}

func TestDecodeRows(t *testing.T) {
	type row struct {
		Op string  `json:"op"`
		S  float64 `json:"latency_s"`
	}
	want := []row{{"all-reduce", 0.5}, {"broadcast", 0.25}}
	for _, c := range []struct {
		name, in string
		want     []row
		err      bool
	}{
		{"object", `{"command":"go run ./bench/comm","machine":{},"rows":[{"op":"all-reduce","latency_s":0.5},{"op":"broadcast","latency_s":0.25}]}`, want, false},
		{"bare array", "\n [{\"op\":\"all-reduce\",\"latency_s\":0.5},{\"op\":\"broadcast\",\"latency_s\":0.25}]", want, false},
		{"empty rows", `{"rows":[]}`, []row{}, false},
		{"no rows", `{"command":"x"}`, nil, true},
		{"not JSON", `{"rows":[`, nil, true},
		{"wrong row type", `[1,2]`, nil, true},
	} {
		got, err := DecodeRows[row]([]byte(c.in))
		if (err != nil) != c.err {
			t.Errorf("%s: err = %v, want error %v", c.name, err, c.err)
			continue
		}
		if !c.err && !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: rows = %+v, want %+v", c.name, got, c.want)
		}
	}
}
