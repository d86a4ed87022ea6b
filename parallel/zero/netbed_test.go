package zero

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

// ZeRO-3 across hosts: 2 hosts of the test bed (network namespaces, links shaped to 1 Gbit/s)
// with 2 worker processes each, started inside their host's namespace with gprun's variables
// and MASTER_ADDR on host 0. InitFromEnv chooses the hierarchical collectives (shared memory
// inside a host, TCP between hosts), so ZeRO-3's all-gathers and reduce-scatters run across
// the hosts (checked in the collectives' debug log); every rank's gathered parameters match
// one process on the global batch within equivTol after 5 AdamW steps, and all ranks end
// bit-identical. Skipped without root or iproute2.
func TestEquivalenceAcrossHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	const hosts, local = 2, 2
	bed := netbed.New(t, hosts, netbed.Link{Rate: "1gbit"})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	world := hosts * local
	cmds := make([]*exec.Cmd, world)
	outs := make([]*bytes.Buffer, world)
	for r := range world {
		cmd := bed.Command(ctx, r/local, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GP_ZERO_TEST_WORKER=equiv", "GP_RDZV_SECRET=zero-test",
			"OPENBLAS_NUM_THREADS=1", "GP_COMM_DEBUG=1", "TORCHELASTIC_RUN_ID=netbed",
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world),
			"LOCAL_RANK="+strconv.Itoa(r%local), "LOCAL_WORLD_SIZE="+strconv.Itoa(local),
			"GROUP_RANK="+strconv.Itoa(r/local), "MASTER_ADDR="+bed.Addr(0), "MASTER_PORT=29510")
		outs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	checksum := regexp.MustCompile(`(?m)^checksum \w+$`)
	hier := regexp.MustCompile(`op=(all-gather|reduce-scatter) .*algo=hier`)
	var first string
	for r, cmd := range cmds {
		err := cmd.Wait()
		out := outs[r].String()
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, out)
		}
		if !hier.MatchString(out) {
			t.Fatalf("rank %d ran no hierarchical all-gather or reduce-scatter:\n%s", r, out)
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
