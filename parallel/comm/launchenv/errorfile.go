package launchenv

import (
	"encoding/json"
	"os"
	"time"
)

// ErrorFileEnv names the environment variable through which a launcher (gprun) gives each
// worker a file to record why it failed, as torchrun's TORCHELASTIC_ERROR_FILE:
// RecordFailure writes a FailureRecord there (comm.Abort calls it; only the first failure
// of the process is kept). When several ranks fail together, the launcher reports the one
// whose failure is its own (CauseRank -1) and came first, rather than a peer that failed
// because of it.
const ErrorFileEnv = "GP_ERROR_FILE"

// FailureRecord is what RecordFailure records in the ErrorFileEnv file, as JSON.
type FailureRecord struct {
	// Rank is the rank that failed.
	Rank int `json:"rank"`
	// Time is when it aborted.
	Time time.Time `json:"time"`
	// Message is the reason's text.
	Message string `json:"message"`
	// CauseRank is the peer whose failure caused this one (comm.Abort's reason wraps that
	// peer's *comm.AbortError, *comm.RemoteError or *comm.PeerGoneError), or -1 when the
	// failure is this rank's own.
	CauseRank int `json:"cause_rank"`
}

// ReadFailureRecord reads the record at path (see ErrorFileEnv).
func ReadFailureRecord(path string) (FailureRecord, error) {
	var r FailureRecord
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	err = json.Unmarshal(b, &r)
	return r, err
}

// RecordFailure writes rec to the ErrorFileEnv file, when the variable names one and the
// file does not exist yet (the first failure of a process is the one that explains it).
// Errors are ignored: the record only improves the launcher's report, and the worker is
// failing already.
func RecordFailure(rec FailureRecord) {
	path := os.Getenv(ErrorFileEnv)
	if path == "" {
		return
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	f.Write(b)
}
