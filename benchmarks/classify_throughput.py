"""How fast the signature catalogue reads logs, against the obvious naive approach and an alternative engine.

Generates one deterministic mixed log (by default 1M lines, ~2 % failure lines, the rest the
progress and NCCL chatter that dominates real job output), then measures over the same lines:

* matcher:   `Catalogue.scan` (RE2: one search per batch of lines for any literal, then an RE2
             set names the candidate signatures of a hit line, and only their regexes run);
* hyperscan: the same matcher with Hyperscan finding the literals instead of RE2 (the engine
             not chosen; RE2 still extracts the groups, Hyperscan has no captures);
* classify:  `classify_file` end to end on a temporary file (bytes -> lines -> matches -> verdict);
* naive:     every rule's regex searched on every line with Python's `re`, no prefilter.

Then the lines that froze the old backtracking engine: a line of a repeated Xid-154 phrase (the
cubic case) at growing sizes, through Python's `re` (the xid-154 pattern alone) and through the
RE2 matcher (the whole catalogue).

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
import re
import tempfile
import time
from collections.abc import Iterator, Sequence

import hyperscan

from benchmarks._git import commit
from goodput.diagnose.classify import classify_file
from goodput.diagnose.signatures import MAX_SCAN_CHARS, Catalogue, Match, Signature, default_catalogue
from goodput.untrusted_text import utf8

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
XID_154_PHRASE = "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from "


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


class HyperscanCatalogue(Catalogue):
    """The engine not chosen, kept here to be measured: Hyperscan finds every literal occurrence
    of a whole batch in one scan and names a line's literals; RE2 still runs the signatures' regexes
    (Hyperscan reports no capture groups). Single-threaded only: its scratch space is per thread."""

    def __init__(self, base: Catalogue) -> None:
        super().__init__(base.signatures, base.version)
        by_literal: dict[str, list[Signature]] = {}
        for sig in self.signatures:
            for lit in sig.literals:
                by_literal.setdefault(lit, []).append(sig)
        literals = sorted(by_literal)
        self._hs_sigs = [tuple(by_literal[lit]) for lit in literals]
        self._hs_order = {s.id: i for i, s in enumerate(self.signatures)}
        self._hs = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self._hs.compile(expressions=[re.escape(lit).encode() for lit in literals], ids=list(range(len(literals))),
                         elements=len(literals), flags=[0] * len(literals))

    def candidates(self, data: bytes) -> tuple[Signature, ...]:
        found: set[int] = set()

        def on_match(index: int, start: int, end: int, flags: int, context: object) -> None:
            found.add(index)

        self._hs.scan(data, match_event_handler=on_match)
        sigs = {sig.id: sig for index in found for sig in self._hs_sigs[index]}
        return tuple(sorted(sigs.values(), key=lambda s: self._hs_order[s.id]))

    def _scan_batch(self, batch: list[str], text: str, first: int) -> Iterator[Match]:
        if text.count("\n") != len(batch) - 1:
            for index, line in enumerate(batch):
                yield from self.match_line(line, first + index)
            return
        data = utf8(text)
        ends: list[int] = []

        def on_match(index: int, start: int, end: int, flags: int, context: object) -> None:
            ends.append(end)

        self._hs.scan(data, match_event_handler=on_match)
        index, pos, last = 0, 0, -1
        for end in sorted(ends):
            index += data.count(b"\n", pos, end)
            pos = end
            if index != last:
                last = index
                yield from self.match_line(batch[index], first + index)


def measure_matcher(lines: Sequence[str], catalogue: Catalogue) -> tuple[float, int]:
    start = time.perf_counter()
    hits = sum(1 for _ in catalogue.scan(lines))
    return time.perf_counter() - start, hits


def measure_naive(lines: Sequence[str]) -> tuple[float, int]:
    """Python's `re`, every pattern on every line: the obvious loop (and the old engine's regexes)."""
    regexes = [re.compile(s.pattern, re.IGNORECASE if s.ignore_case else 0) for s in default_catalogue().signatures]
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


def measure_pathological(old_max_chars: int) -> list[dict[str, object]]:
    """Seconds for one line of a repeated Xid-154 phrase: the old engine's cubic case."""
    cat = default_catalogue()
    signature = cat.get("xid-154-action")
    assert signature is not None
    old = re.compile(signature.pattern)
    rows: list[dict[str, object]] = []
    for size in (4_000, 8_000, 16_000, 63_000):
        line = (XID_154_PHRASE * (size // len(XID_154_PHRASE) + 1))[:size]
        start = time.perf_counter()
        cat.match_line(line)
        row: dict[str, object] = {"chars": size, "re2_matcher_s": round(time.perf_counter() - start, 5)}
        if size <= old_max_chars:
            start = time.perf_counter()
            old.search(line)
            row["python_re_one_pattern_s"] = round(time.perf_counter() - start, 4)
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--hit-rate", type=float, default=0.02)
    parser.add_argument("--naive-lines", type=int, default=0,
                        help="measure the naive loop on the first N lines only and extrapolate (0: all lines)")
    parser.add_argument("--old-pathological-chars", type=int, default=16_000,
                        help="longest Xid-154 line given to Python's re (its time grows with the cube)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)

    lines = generate(args.lines, args.hit_rate)
    matcher_s, matcher_hits = measure_matcher(lines, default_catalogue())
    hyperscan_s, hyperscan_hits = measure_matcher(lines, HyperscanCatalogue(default_catalogue()))
    if hyperscan_hits != matcher_hits:
        raise SystemExit(f"the engines disagree: RE2 found {matcher_hits} hits, Hyperscan {hyperscan_hits}")
    classify_s, category = measure_classify_file(lines)
    subset = lines if args.naive_lines <= 0 or args.naive_lines >= len(lines) else lines[:args.naive_lines]
    naive_s, _ = measure_naive(subset)
    pathological = measure_pathological(args.old_pathological_chars)

    rate = len(lines) / matcher_s
    hyperscan_rate = len(lines) / hyperscan_s
    classify_rate = len(lines) / classify_s
    naive_rate = len(subset) / naive_s
    extrapolated = len(subset) < len(lines)
    rows = [
        ("catalogue matcher (RE2, scan)", len(lines), matcher_s, rate, f"{matcher_hits} hits"),
        ("same, Hyperscan for literals", len(lines), hyperscan_s, hyperscan_rate, f"{hyperscan_hits} hits"),
        ("classify_file end to end", len(lines), classify_s, classify_rate, f"verdict {category}"),
        ("naive: every regex, every line", len(subset), naive_s, naive_rate,
         f"{len(default_catalogue())} Python re patterns/line" + (", measured on a prefix" if extrapolated else "")),
    ]
    print(f"{'method':<32} {'lines':>10} {'seconds':>9} {'lines/s':>12}  note")
    for name, n, secs, per_s, note in rows:
        print(f"{name:<32} {n:>10} {secs:>9.2f} {per_s:>12,.0f}  {note}")
    print(f"speed-up of the matcher over the naive loop: {rate / naive_rate:.1f}x")
    if extrapolated:
        print(f"note: the naive rate was measured on the first {len(subset):,} of {len(lines):,} lines and is "
              f"extrapolated per line (the naive full run would take ~{len(lines) / naive_rate:.0f} s); "
              "pass --naive-lines 0 to measure it over every line")
    print("one line of a repeated Xid-154 phrase:")
    for row in pathological:
        old = row.get("python_re_one_pattern_s")
        print(f"  {row['chars']:>6} chars: RE2 matcher {row['re2_matcher_s']:.4f} s"
              + (f", Python re (xid-154 pattern alone) {old:.3f} s" if old is not None else ""))
    if args.json:
        print(json.dumps({"lines_per_s": round(rate, 1), "naive_lines_per_s": round(naive_rate, 1),
                          "ratio": round(rate / naive_rate, 2), "engine": "re2",
                          "hyperscan_lines_per_s": round(hyperscan_rate, 1),
                          "classify_file_lines_per_s": round(classify_rate, 1), "lines": len(lines),
                          "pathological_xid154": pathological, "commit": commit(), "cpus": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
