package ddp

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
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
	const hosts, local = 2, 2
	bed := netbed.New(t, hosts, netbed.Link{Rate: "1gbit", Delay: 500 * time.Microsecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	world := hosts * local
	cmds := make([]*exec.Cmd, world)
	outs := make([]*bytes.Buffer, world)
	for r := range world {
		cmd := bed.Command(ctx, r/local, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GP_DDP_TEST_WORKER=equiv", "GP_RDZV_SECRET=ddp-test",
			"OPENBLAS_NUM_THREADS=1", "GP_COMM_DEBUG=1", "TORCHELASTIC_RUN_ID=netbed",
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world),
			"LOCAL_RANK="+strconv.Itoa(r%local), "LOCAL_WORLD_SIZE="+strconv.Itoa(local),
			"GROUP_RANK="+strconv.Itoa(r/local), "MASTER_ADDR="+bed.Addr(0), "MASTER_PORT=29500")
		outs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	checksum := regexp.MustCompile(`(?m)^checksum \w+$`)
	var first string
	for r, cmd := range cmds {
		err := cmd.Wait()
		out := outs[r].String()
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, out)
		}
		if !bytes.Contains(outs[r].Bytes(), []byte("algo=hier")) {
			t.Fatalf("rank %d did not run hierarchical collectives:\n%s", r, out)
		}
		sum := checksum.FindString(out)
		if r == 0 {
			first = sum
		}
		if sum == "" || sum != first {
			t.Fatalf("rank %d: %q, rank 0: %q", r, sum, first)
		}
	}
	t.Logf("shaping %s; %s on every rank", bed.Shaping, first)
}
