"""How fast the signature catalogue reads logs, against the obvious naive approach.

Generates one deterministic mixed log (by default 1M lines, ~2 % failure lines, the rest the
progress and NCCL chatter that dominates real job output), then measures over the same lines:

* matcher:  `Catalogue.scan` (one trie-regex prefilter, then only the rules whose literals occur);
* classify: `classify_file` end to end on a temporary file (bytes -> lines -> matches -> verdict);
* naive:    every rule's regex searched on every line, no prefilter.

The naive loop is slow by design (about 40 s for 1M lines on one core); it runs over the whole log
unless `--naive-lines N` asks for the first N lines only, in which case its rate is extrapolated
per line and the output says so.

    python -m benchmarks.classify_throughput [--lines N] [--naive-lines N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections.abc import Sequence

from goodput.classify import classify_file
from goodput.signatures import MAX_SCAN_CHARS, default_catalogue

CLEAN = (
    "{t:>2}: [rank{t}]: iteration {i:>8}/  250000 | consumed samples: {s:>12} | elapsed time per iteration "
    "(ms): {ms:.1f} | learning rate: 2.994E-04 | global batch size:   512 | lm loss: {loss:.6E} | "
    "loss scale: 1.0 | grad norm: 0.{g:03d} | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "node{n:03d}:{pid}:{pid} [{d}] NCCL INFO Channel {c:02d}/0 : {t}[{d}] -> {u}[{d}] via P2P/IPC/read",
    "node{n:03d}:{pid}:{pid} [{d}] NCCL INFO comm 0x55{pid:x} rank {t} nRanks 64 nNodes 8 localRanks 8 "
    "localRank {d} MNNVL 0",
    "[titan] 2026-11-28 23:59:{sec:02d},101 - root - INFO - step: {i:>6}  loss: {loss:8.4f}  memory: 58.31GiB"
    "(73.69%)  tps: 4,0{g:02d}  tflops: 206.48  mfu: 20.88%",
    "Epoch 3:  {p:>2}%|███▏      | {i}/250000 [22:17<2:42:51,  1.11s/it, v_num=7, train_loss={loss:.3f}]",
    "[2026-11-29 05:02:11,481] [INFO] [logging.py:128:log_dist] [Rank 0] step={i}, skipped=0, lr=[0.00029]",
    "{t:>2}: [rank{t}]: data loader: loaded shard /lustre/datasets/web/shard_{i:06d}.bin ({s} tokens)",
    "{t:>2}: [rank{t}]: [after training is done] datetime: 2026-11-29 05:02:{sec:02d}",
)
HITS = (
    "node{n:03d}:{pid}:{pid} [{d}] NCCL INFO comm 0x55{pid:x} rank {t} nranks 64 cudaDev {d} busId {d}b000 "
    "commId 0x9d2f1e44a01b7c3e - Init COMPLETE",
    "Nov 29 07:41:02 node{n:03d} kernel: NVRM: Xid (PCI:0000:{d}b:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.",
    "[rank{t}]:[E1129 07:51:04.770121 71211 ProcessGroupNCCL.cpp:632] [Rank {t}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum={i}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
    "for 600047 milliseconds before timing out.",
    "{t:>2}: Traceback (most recent call last):",
    "{t:>2}: KeyError: 'input_ids'",
    "[rank{t}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU {d} has a total "
    "capacity of 79.10 GiB of which 1.07 GiB is free.",
    "OSError: [Errno 28] No space left on device: '/lustre/ckpt/iter_{i:07d}/model.pt'",
    "srun: error: node{n:03d}: task {t}: Exited with exit code 1",
    "node{n:03d}:{pid}:{pid} [{d}] NCCL WARN NET/IB : Got completion from peer 10.0.{d}.{t}<4102> with error 12, "
    "opcode 0, len 0, vendor err 129 (Recv)",
)


def generate(lines: int, hit_rate: float, seed: int = 1129) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for i in range(lines):
        templates = HITS if rnd.random() < hit_rate else CLEAN
        t = rnd.randrange(64)
        out.append(rnd.choice(templates).format(
            i=i, t=t, u=(t + 1) % 64, n=t // 8, d=t % 8, c=rnd.randrange(32), pid=40000 + t, s=i * 512,
            ms=1800 + rnd.random() * 80, loss=2 + rnd.random(), g=rnd.randrange(1000), sec=i % 60,
            p=i % 100))
    return out


def measure_matcher(lines: Sequence[str]) -> tuple[float, int]:
    cat = default_catalogue()
    start = time.perf_counter()
    hits = sum(1 for _ in cat.scan(lines))
    return time.perf_counter() - start, hits


def measure_naive(lines: Sequence[str]) -> tuple[float, int]:
    regexes = [s.regex for s in default_catalogue().signatures]
    start = time.perf_counter()
    hits = 0
    for line in lines:
        line = line[:MAX_SCAN_CHARS]
        for rx in regexes:
            if rx.search(line) is not None:
                hits += 1
    return time.perf_counter() - start, hits


def measure_classify_file(lines: Sequence[str]) -> tuple[float, str]:
    fd, path = tempfile.mkstemp(suffix=".log")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        start = time.perf_counter()
        verdict = classify_file(path)
        return time.perf_counter() - start, str(verdict.category)
    finally:
        os.unlink(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--hit-rate", type=float, default=0.02)
    parser.add_argument("--naive-lines", type=int, default=0,
                        help="measure the naive loop on the first N lines only and extrapolate (0: all lines)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)

    lines = generate(args.lines, args.hit_rate)
    matcher_s, matcher_hits = measure_matcher(lines)
    classify_s, category = measure_classify_file(lines)
    subset = lines if args.naive_lines <= 0 or args.naive_lines >= len(lines) else lines[:args.naive_lines]
    naive_s, _ = measure_naive(subset)

    rate = len(lines) / matcher_s
    classify_rate = len(lines) / classify_s
    naive_rate = len(subset) / naive_s
    extrapolated = len(subset) < len(lines)
    rows = [
        ("catalogue matcher (scan)", len(lines), matcher_s, rate, f"{matcher_hits} hits"),
        ("classify_file end to end", len(lines), classify_s, classify_rate, f"verdict {category}"),
        ("naive: every regex, every line", len(subset), naive_s, naive_rate,
         f"{len(default_catalogue())} regexes/line" + (", measured on a prefix" if extrapolated else "")),
    ]
    print(f"{'method':<32} {'lines':>10} {'seconds':>9} {'lines/s':>12}  note")
    for name, n, secs, per_s, note in rows:
        print(f"{name:<32} {n:>10} {secs:>9.2f} {per_s:>12,.0f}  {note}")
    print(f"speed-up of the matcher over the naive loop: {rate / naive_rate:.1f}x")
    if extrapolated:
        print(f"note: the naive rate was measured on the first {len(subset):,} of {len(lines):,} lines and is "
              f"extrapolated per line (the naive full run would take ~{len(lines) / naive_rate:.0f} s); "
              "pass --naive-lines 0 to measure it over every line")
    if args.json:
        print(json.dumps({"lines_per_s": round(rate, 1), "naive_lines_per_s": round(naive_rate, 1),
                          "ratio": round(rate / naive_rate, 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
