package benchutil

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Provenance is what every results file under bench/results records at its top level beside
// its figures: the command that reproduces the run and the machine it ran on, with the load
// average when the run started (Machine.Load) and, for a run that measures for long, when it
// ended (LoadEnd, set by End). A result struct embeds it, so that encoding/json writes its
// fields at the top level; a result built as a map gets them from Set. bench/report reads
// "command" and "machine" from there.
type Provenance struct {
	Command string  `json:"command"`
	Machine Machine `json:"machine"`
	LoadEnd float64 `json:"load_avg_1m_end,omitempty"`
}

// Start is the Provenance of a run of bench/<name> that starts now: Command(name, args) and
// ReadMachine. args are the flags the user passed (os.Args[1:] of the benchmark's own
// process); a process started by a benchmark with internal flags does not call Start, its
// parent does.
func Start(name string, args []string) Provenance {
	return Provenance{Command: Command(name, args), Machine: ReadMachine()}
}

// End records the load average now, at the end of the run, as LoadEnd.
func (p *Provenance) End() { p.LoadEnd = LoadAvg() }

// Set puts p's fields into doc, a result built as a map, under the keys a struct embedding p
// would have.
func (p Provenance) Set(doc map[string]any) {
	doc["command"], doc["machine"] = p.Command, p.Machine
	if p.LoadEnd != 0 {
		doc["load_avg_1m_end"] = p.LoadEnd
	}
}

// Save writes doc, a run's result that carries p (a struct embedding it, or a map given it
// by Set), to path as indented JSON, making path's folder. It writes a temporary file in
// that folder and renames it into place, so that an interrupted run leaves the previous
// result whole. It then prints to w one line naming the file with the machine, the load and
// the command that reproduces the run, so that the figures printed above it say where they
// come from.
func (p Provenance) Save(w io.Writer, path string, doc any) error {
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("results for %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results for %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("results for %s: %w", path, err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	fmt.Fprintln(w, p.Line(path))
	return nil
}

// Line is the line Save prints for a result written to path: the file, the machine with
// the load when the run started, the load when it ended (when End recorded it) and the
// command.
func (p Provenance) Line(path string) string {
	s := "wrote " + path + " (" + p.Machine.String()
	if p.LoadEnd != 0 {
		s += "; load at the end " + ftoa(p.LoadEnd)
	}
	return s + "): " + p.Command
}

// Command is the command line that reproduces a run of bench/<name> given args:
// "go run ./bench/<name>" followed by args, each quoted for a POSIX shell where it has a
// character the shell would read (so the line can be pasted as it is).
func Command(name string, args []string) string {
	parts := []string{"go", "run", "./bench/" + name}
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

// shellQuote is s as one POSIX shell word: as it is when it has only characters no shell
// reads specially, else in single quotes (a single quote inside closes them, is escaped
// with a backslash, and reopens them).
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	plain := true
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./=,:@%+", c)) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Rows is a results file whose figures are a list of rows: the Provenance, then the rows
// under "rows". Units says the unit of any row field whose name does not (omitted when
// every name does).
type Rows[T any] struct {
	Provenance
	Units map[string]string `json:"units,omitempty"`
	Rows  []T               `json:"rows"`
}

// DecodeRows reads the rows of a results file written as Rows (an object with "rows"), or
// as a bare JSON array of rows, the form such files had before they recorded their
// provenance, so that readers of results keep reading files not yet re-measured.
func DecodeRows[T any](b []byte) ([]T, error) {
	trimmed := strings.TrimLeft(string(b), " \t\r\n")
	if strings.HasPrefix(trimmed, "[") {
		var rows []T
		if err := json.Unmarshal(b, &rows); err != nil {
			return nil, fmt.Errorf("results rows (a JSON array): %w", err)
		}
		return rows, nil
	}
	var doc struct {
		Rows *[]T `json:"rows"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("results file (an object with rows): %w", err)
	}
	if doc.Rows == nil {
		return nil, fmt.Errorf("results file has no \"rows\" (write it as benchutil.Rows)")
	}
	return *doc.Rows, nil
}
