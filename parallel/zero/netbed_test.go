package zero

import (
	"regexp"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/netbed"
)

// ZeRO-3 across hosts: 2 hosts of the test bed (network namespaces, links shaped to 1 Gbit/s)
// with 2 worker processes each (netbed's RunRanks). InitFromEnv chooses the hierarchical
// collectives (shared memory inside a host, TCP between hosts), so ZeRO-3's all-gathers and
// reduce-scatters run across the hosts (checked in the collectives' debug log); every rank's
// gathered parameters match one process on the global batch within equivTol after 5 AdamW
// steps, and all ranks end bit-identical. Skipped without root or iproute2.
func TestEquivalenceAcrossHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	bed := netbed.New(t, 2, netbed.Link{Rate: "1gbit"})
	outs := bed.RunRanks(t, 2, 29510, 90*time.Second, "GP_ZERO_TEST_WORKER=equiv", "GP_RDZV_SECRET=zero-test",
		"OPENBLAS_NUM_THREADS=1", "GP_COMM_DEBUG=1", "TORCHELASTIC_RUN_ID=netbed")
	first := netbed.SameChecksum(t, outs, regexp.MustCompile(`op=(all-gather|reduce-scatter) .*algo=hier`))
	t.Logf("shaping %s; %s on every rank", bed.Shaping, first)
}
