package ddp

import (
	"regexp"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/netbed"
)

// DDP across hosts: 2 hosts of the test bed (network namespaces, links shaped to 1 Gbit/s)
// with 2 worker processes each, started inside their host's namespace with gprun's variables
// (GROUP_RANK, LOCAL_RANK, LOCAL_WORLD_SIZE) and MASTER_ADDR on host 0. InitFromEnv chooses
// the hierarchical collectives (shared memory inside a host, TCP between hosts: checked in
// the collectives' debug log), every rank matches the one-process reference on the global
// batch within equivTol, and all ranks end bit-identical. Skipped without root or iproute2.
func TestEquivalenceAcrossHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	bed := netbed.New(t, 2, netbed.Link{Rate: "1gbit", Delay: 500 * time.Microsecond})
	outs := bed.RunRanks(t, 2, 29500, 60*time.Second, "GP_DDP_TEST_WORKER=equiv", "GP_RDZV_SECRET=ddp-test",
		"OPENBLAS_NUM_THREADS=1", "GP_COMM_DEBUG=1", "TORCHELASTIC_RUN_ID=netbed")
	first := netbed.SameChecksum(t, outs, regexp.MustCompile(`algo=hier`))
	t.Logf("shaping %s; %s on every rank", bed.Shaping, first)
}
