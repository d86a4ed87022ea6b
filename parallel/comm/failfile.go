package comm

import (
	"encoding/json"
	"errors"
	"os"
	"time"
)

// ErrorFileEnv names the environment variable through which a launcher (gprun) gives each
// worker a file to record why it failed, as torchrun's TORCHELASTIC_ERROR_FILE: Abort writes
// a FailureRecord there (only the first failure of the process; an existing file is kept).
// When several ranks fail together, the launcher reports the one whose failure is its own
// (CauseRank -1) and came first, rather than a peer that failed because of it.
const ErrorFileEnv = "GP_ERROR_FILE"

// FailureRecord is what Abort records in the ErrorFileEnv file, as JSON.
type FailureRecord struct {
	// Rank is the rank that failed.
	Rank int `json:"rank"`
	// Time is when it aborted.
	Time time.Time `json:"time"`
	// Message is the reason's text.
	Message string `json:"message"`
	// CauseRank is the peer whose failure caused this one (the reason wraps its
	// *AbortError, *RemoteError or *PeerGoneError), or -1 when the failure is this rank's own.
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

// recordFailure writes rank's failure to the ErrorFileEnv file, when there is one and it
// does not exist yet. Errors are ignored: the record only improves the launcher's report.
func recordFailure(rank int, reason error) {
	path := os.Getenv(ErrorFileEnv)
	if path == "" {
		return
	}
	rec := FailureRecord{Rank: rank, Time: time.Now(), Message: reason.Error(), CauseRank: causeRank(reason)}
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

// causeRank returns the peer whose failure err reports, or -1.
func causeRank(err error) int {
	var ae *AbortError
	if errors.As(err, &ae) && ae.Remote {
		return ae.Rank
	}
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Rank
	}
	var pg *PeerGoneError
	if errors.As(err, &pg) {
		return pg.Rank
	}
	return -1
}
