package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/ddp/commhook"
)

// The DDP communication hook of the "ddp" role (bench/ddpnet passes it; the default is DDP's
// averaging all-reduce, as before).
var (
	hookFlag      = flag.String("hook", "none", "DDP communication hook: none, fp16, bf16, powersgd or powersgdR (rank R; powersgd is rank 1)")
	psgdStartFlag = flag.Int("powersgd-start", 2, "-hook powersgd: start_powerSGD_iter (plain all-reduce before it; > 1)")
)

// hookOptions are the ddp options for -hook (none for "none").
func hookOptions() ([]ddp.Option, error) {
	var h ddp.CommHook
	switch name := *hookFlag; {
	case name == "" || name == "none":
		return nil, nil
	case name == "fp16":
		h = commhook.FP16Compress()
	case name == "bf16":
		h = commhook.BF16Compress()
	case strings.HasPrefix(name, "powersgd"):
		r := 1
		if s := strings.TrimPrefix(name, "powersgd"); s != "" {
			var err error
			if r, err = strconv.Atoi(s); err != nil {
				return nil, fmt.Errorf("-hook %q: want powersgdR with R the rank", name)
			}
		}
		var err error
		if h, err = commhook.PowerSGD(commhook.PowerSGDRank(r), commhook.PowerSGDStartIter(*psgdStartFlag)); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown -hook %q (none, fp16, bf16, powersgdR)", name)
	}
	return []ddp.Option{ddp.WithCommHook(h)}, nil
}
