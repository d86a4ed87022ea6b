#!/usr/bin/env python3
"""Per-step statistics of bench/ddp's merged Chrome trace (ddp_trace.json), for world 2.

For each trace: the last bucket's tail (its all-reduce's end after the later rank's backward
end), the step span (first forward start to last event end over both ranks) against the
ranks' mean forward+backward, rank 1's buffer-broadcast wait, and the compute noise: the mean
|forward+backward of rank 0 - rank 1| per step and each rank's standard deviation over steps.
Usage: trace_stats.py bench/results/ddp_trace.json [more traces]
"""
import collections
import json
import statistics as st
import sys


def steps_of(path):
    t = json.load(open(path))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    by = collections.defaultdict(list)
    for e in ev:
        if e.get("ph") == "X":
            by[(e["pid"], e["args"].get("step"))].append(e)
    return by, sorted(set(s for (_, s) in by))


def main():
    for path in sys.argv[1:]:
        by, steps = steps_of(path)
        last = max(int(e["name"].split()[-1]) for es in by.values() for e in es if e["name"].startswith("all-reduce bucket"))
        tail, span, comp, bcast, diff, per = [], [], [], [], [], {0: [], 1: []}
        for s in steps:
            r = {}
            for pid in (0, 1):
                d = {}
                for e in by[(pid, s)]:
                    d.setdefault(e["name"], []).append(e)
                bw, fw = d["backward"][0], d["forward"][0]
                ar = d["all-reduce bucket %d" % last][0]
                r[pid] = dict(start=fw["ts"], bend=bw["ts"] + bw["dur"], arend=ar["ts"] + ar["dur"],
                              end=max(e["ts"] + e["dur"] for e in by[(pid, s)]), comp=fw["dur"] + bw["dur"],
                              bc=d.get("broadcast-buffers", [{"dur": 0}])[0]["dur"])
                per[pid].append(r[pid]["comp"])
            later = max(r[0]["bend"], r[1]["bend"])
            tail.append(max(r[0]["arend"], r[1]["arend"]) - later)
            span.append(max(r[0]["end"], r[1]["end"]) - min(r[0]["start"], r[1]["start"]))
            comp.append((r[0]["comp"] + r[1]["comp"]) / 2)
            bcast.append(r[1]["bc"])
            diff.append(abs(r[0]["comp"] - r[1]["comp"]))
        ms = lambda x: st.mean(x) / 1e3
        print("%s: %d steps; last bucket tail mean %.2f ms (median %.2f); step span %.1f ms, forward+backward %.1f ms, "
              "span - compute %.1f ms; rank 1 broadcast wait %.2f ms; |compute r0 - r1| %.1f ms, stdev r0 %.1f r1 %.1f ms"
              % (path, len(steps), ms(tail), st.median(tail) / 1e3, ms(span), ms(comp), ms(span) - ms(comp), ms(bcast),
                 ms(diff), st.pstdev(per[0]) / 1e3, st.pstdev(per[1]) / 1e3))


if __name__ == "__main__":
    main()
