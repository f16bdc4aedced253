"""Hangs and stragglers from multi-line evidence: the odd one out in stack dumps, nvidia-smi tables
and per-rank step-time tables, in the tools' documented formats (py-spy dump, Python faulthandler,
nvidia-smi's table and --query-gpu CSV, Megatron-LM's per-rank timers), and PyTorch's
monitored_barrier report."""

from __future__ import annotations

from goodput.diagnose.classify import classify_lines
from goodput.models import Category, CulpritKind

# PyTorch's heartbeat monitor: the stall is in the log, the line names nobody (every rank prints it).
STUCK = ("[rank{r}]:[E1203 10:00:00.000000 41 ProcessGroupNCCL.cpp:1404] [PG ID 0 PG GUID 0 Rank {r}] "
         "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring "
         "enqueued collectives.")
TIMEOUT = ("[rank{r}]:[E1203 10:00:00.000000 41 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective "
           "operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
           "ran for 600042 milliseconds before timing out.")


def py_spy(rank: int, frames: list[str]) -> list[str]:
    head = [f"[rank{rank}]:Process {4100 + rank}: python train.py",
            f"[rank{rank}]:Python v3.11.9 (/usr/bin/python3.11)",
            f"[rank{rank}]:", f'[rank{rank}]:Thread {4100 + rank} (active): "MainThread"']
    return head + [f"[rank{rank}]:    {f}" for f in frames]


IN_ALL_REDUCE = ["all_reduce (torch/distributed/distributed_c10d.py:2501)",
                 "wrapper (torch/distributed/c10d_logger.py:83)", "train_step (train.py:212)",
                 "<module> (train.py:300)"]
IN_SAVE = ["write (torch/serialization.py:620)", "save (torch/serialization.py:652)", "save_checkpoint (train.py:120)",
           "<module> (train.py:301)"]


def interleave(*blocks: list[str]) -> list[str]:
    out: list[str] = []
    for i in range(max(map(len, blocks))):
        out += [b[i] for b in blocks if i < len(b)]
    return out


def test_py_spy_dumps_interleaved_name_the_one_rank_outside_the_collective() -> None:
    # broke/before: no stack signature reads frames -> verdict hang with no culprit.
    lines = interleave(py_spy(0, IN_ALL_REDUCE), py_spy(1, IN_ALL_REDUCE), py_spy(2, IN_SAVE), py_spy(3, IN_ALL_REDUCE))
    v = classify_lines(lines)
    assert v.category is Category.HANG
    assert (v.culprit_kind, v.rank, v.culprit) == (CulpritKind.RANK, 2, "rank 2")
    assert v.restart and not v.drain
    assert "stack-odd-one-out" in v.signatures


def test_faulthandler_dumps_under_srun_labels_name_the_odd_task() -> None:
    # broke/before: verdict hang, culprit unknown.
    def dump(task: int, frames: list[tuple[str, int, str]]) -> list[str]:
        return [f"{task}: Thread 0x00007f3a{task:08x} (most recent call first):"] + [
            f'{task}:   File "{path}", line {n} in {fn}' for path, n, fn in frames]

    collective = [("/opt/torch/distributed/distributed_c10d.py", 3230, "barrier"), ("/srv/train.py", 88, "main")]
    loop = [("/srv/data/tokenize.py", 41, "encode"), ("/srv/train.py", 80, "main")]
    lines = interleave(dump(0, collective), dump(1, collective), dump(2, collective), dump(3, collective),
                       dump(4, collective), dump(5, loop))
    v = classify_lines(lines)
    assert (v.category, v.culprit_kind, v.rank) == (Category.HANG, CulpritKind.RANK, 5)
    assert not v.drain


def test_every_rank_inside_the_collective_names_nobody() -> None:
    lines = interleave(py_spy(0, IN_ALL_REDUCE), py_spy(1, IN_ALL_REDUCE), py_spy(2, IN_ALL_REDUCE))
    v = classify_lines(lines)
    assert v.category is Category.HANG
    assert v.culprit is None and "stack-odd-one-out" not in v.signatures and not v.drain


def test_a_rank_waiting_on_its_data_loader_keeps_the_input_pipeline_reading() -> None:
    loader = ["_next_data (torch/utils/data/dataloader.py:1328)", "__next__ (torch/utils/data/dataloader.py:631)",
              "train (train.py:70)"]
    lines = py_spy(0, IN_ALL_REDUCE) + py_spy(1, IN_ALL_REDUCE) + py_spy(2, loader)
    v = classify_lines(lines)
    assert "stack-odd-one-out" not in v.signatures
    assert "input-pipeline-hang" in v.signatures and not v.restart


def test_the_odd_stack_names_the_culprit_of_a_timeout_too_few_ranks_reported() -> None:
    # broke/before: nccl-timeout with no culprit (two reporters are too few to infer the silent rank).
    lines = [TIMEOUT.format(r=0), TIMEOUT.format(r=1)]
    lines += py_spy(0, IN_ALL_REDUCE) + py_spy(1, IN_ALL_REDUCE) + py_spy(2, IN_SAVE)
    v = classify_lines(lines)
    assert v.category is Category.NCCL_TIMEOUT
    assert (v.culprit_kind, v.rank) == (CulpritKind.RANK, 2)
    assert not v.drain


def smi_table(utils: list[int], host: str = "") -> list[str]:
    p = f"{host}: " if host else ""
    out = [p + "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           p + "|=========================================+========================+======================|"]
    for i, util in enumerate(utils):
        bus = f"00000000:{0x18 + 0x10 * i:02X}:00.0"
        out += [p + f"|   {i}  NVIDIA H100 80GB HBM3          On  |   {bus} Off |                    0 |",
                p + f"| N/A   41C    P0            312W /  700W |   71234MiB /  81559MiB |"
                    f"    {util:>3}%      Default |",
                p + "+-----------------------------------------+------------------------+----------------------+"]
    return out


def test_nvidia_smi_table_with_one_idle_gpu_names_that_gpu_on_its_host() -> None:
    # broke/before: hang with no culprit.
    lines = [STUCK.format(r=0), *smi_table([100, 100, 100, 0, 100, 100, 100, 100], host="gpu-b07")]
    v = classify_lines(lines)
    assert v.category is Category.HANG
    assert (v.culprit_kind, v.host, v.gpu) == (CulpritKind.GPU, "gpu-b07", "0000:48:00.0")
    assert not v.drain and v.restart


def test_nvidia_smi_table_with_every_gpu_busy_is_a_hung_collective_without_culprit() -> None:
    lines = [STUCK.format(r=0), *smi_table([100] * 8)]
    v = classify_lines(lines)
    assert v.category is Category.HANG and v.culprit is None and not v.drain
    # broke/before: the table was not read at all.
    assert "gpus-all-busy-stalled" in v.signatures


def test_a_py_spy_dump_is_stall_enough_for_the_gpu_table() -> None:
    # broke/before (this module's first version): a dump's header was not taken as a stall, the table ignored.
    lines = py_spy(0, IN_ALL_REDUCE) + smi_table([100, 100, 0, 100], host="gpu-b07")
    v = classify_lines(lines)
    assert (v.category, v.culprit_kind, v.gpu) == (Category.HANG, CulpritKind.GPU, "0000:38:00.0")


def test_a_gpu_table_without_a_stall_is_no_failure() -> None:
    v = classify_lines(smi_table([100, 0, 100, 100]))
    assert v.category is Category.UNKNOWN and not v.restart and not v.drain


def test_nvidia_smi_query_csv_idle_gpu() -> None:
    # broke/before: hang with no culprit.
    lines = [STUCK.format(r=0), "index, pci.bus_id, utilization.gpu [%], memory.used [MiB]",
             "0, 00000000:18:00.0, 100 %, 70211 MiB", "1, 00000000:2A:00.0, 100 %, 70211 MiB",
             "2, 00000000:3A:00.0, 0 %, 70211 MiB", "3, 00000000:5D:00.0, 100 %, 70211 MiB"]
    v = classify_lines(lines)
    assert (v.category, v.culprit_kind, v.gpu) == (Category.HANG, CulpritKind.GPU, "0000:3a:00.0")
    assert not v.drain


def test_one_slow_rank_among_64_is_the_straggler_and_its_named_node_is_drained() -> None:
    # broke/before: no straggler rule -> category unknown.
    lines = [f"node{r // 8:02d}: [rank{r}]: rank {r}: {1.92 if r == 37 else 1.20 + 0.01 * (r % 5):.2f} s/it"
             for r in range(64)]
    v = classify_lines(lines)
    assert v.category is Category.STRAGGLER
    assert (v.culprit_kind, v.rank, v.host) == (CulpritKind.RANK, 37, "node04")
    assert v.restart and v.drain


def test_straggler_by_throughput_is_the_low_one() -> None:
    lines = [f"Rank {r} = {2100 if r == 5 else 3400 + 10 * (r % 3)} tokens/s" for r in range(16)]
    v = classify_lines(lines)
    assert (v.category, v.rank) == (Category.STRAGGLER, 5)
    assert not v.drain  # no host named: nothing to drain


def test_uniform_ranks_have_no_straggler() -> None:
    lines = [f"rank {r}: {1.20 + 0.01 * (r % 7):.2f} s/it" for r in range(64)]
    v = classify_lines(lines)
    assert v.category is Category.UNKNOWN and not v.restart and not v.drain


def test_megatron_times_across_ranks() -> None:
    lines = ["times across ranks (ms):", "  forward-backward:"]
    lines += [f"     rank {r:2d}: {2950.12 if r == 11 else 1502.30 + r:.2f}" for r in range(16)]
    v = classify_lines(lines)
    assert (v.category, v.rank) == (Category.STRAGGLER, 11)


def test_monitored_barrier_names_the_ranks_that_did_not_arrive() -> None:
    # broke/before: no signature -> unknown.
    v = classify_lines(["[rank0]:RuntimeError: [Rank 0]: Rank 3 failed to pass monitoredBarrier in 30000 ms",
                        "[rank0]: Original exception: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                        "Read error [10.0.0.3]:40412: Connection reset by peer"])
    assert (v.category, v.culprit_kind, v.rank) == (Category.HANG, CulpritKind.RANK, 3)
    assert v.restart and not v.drain
    v = classify_lines(["[Rank 0]: Ranks 1, 5 failed to pass monitoredBarrier in 2000 ms"])
    assert v.culprit == "ranks 1, 5"


def test_faulthandler_dumps_by_host_name_the_odd_host_without_draining_it() -> None:
    # broke/before: hang with no culprit.
    def dump(host: str, fn: str, path: str) -> list[str]:
        return [f"[{host}:4101] Thread 0x00007f3a00001000 (most recent call first):",
                f'[{host}:4101]   File "{path}", line 77 in {fn}']

    lines = interleave(dump("gpu-a01", "all_gather", "/opt/torch/distributed/distributed_c10d.py"),
                       dump("gpu-a02", "all_gather", "/opt/torch/distributed/distributed_c10d.py"),
                       dump("gpu-a03", "read", "/srv/io/shards.py"))
    v = classify_lines(lines)
    assert (v.category, v.host) == (Category.HANG, "gpu-a03")
    assert v.restart and not v.drain


def test_a_node_that_answers_ping_but_not_ssh_is_a_node_failure() -> None:
    # broke/before: nothing read -> unknown, no drain.
    lines = ["$ ping -c 2 gpu-b07", "PING gpu-b07 (10.1.0.7) 56(84) bytes of data.",
             "64 bytes from gpu-b07 (10.1.0.7): icmp_seq=1 ttl=64 time=0.183 ms",
             "$ ssh gpu-b07 py-spy dump --pid 4101", "ssh: connect to host gpu-b07 port 22: Connection timed out"]
    v = classify_lines(lines)
    assert (v.category, v.culprit_kind, v.host) == (Category.NODE_FAILURE, CulpritKind.NODE, "gpu-b07")
    assert v.drain and v.restart
    # sshd accepting the TCP connection but never sending its banner is the same wedged user space.
    v = classify_lines(["64 bytes from 10.1.0.7: icmp_seq=3 ttl=64 time=0.2 ms",
                        "Connection timed out during banner exchange", "Connection to 10.1.0.7 port 22 timed out"])
    assert (v.category, v.host, v.drain) == (Category.NODE_FAILURE, "10.1.0.7", True)


def test_ssh_failing_without_a_ping_answer_or_to_another_host_is_not_a_node_verdict() -> None:
    for lines in (["ssh: connect to host gpu-b07 port 22: Connection refused"],
                  ["64 bytes from gpu-b08 (10.1.0.8): icmp_seq=1 ttl=64 time=0.2 ms",
                   "ssh: connect to host gpu-b07 port 22: Connection refused"]):
        v = classify_lines(lines)
        assert v.category is not Category.NODE_FAILURE and not v.drain


def test_what_a_log_can_add_to_the_stall_evidence_is_bounded() -> None:
    from goodput.diagnose.signatures import default_catalogue
    from goodput.diagnose.signatures import stalls as st
    from goodput.diagnose.signatures.verdict import VerdictBuilder

    cat = default_catalogue()
    lines = [f"[rank{r}]:Thread 0x00007f3a00001000 (most recent call first):" for r in range(st.MAX_GROUPS + 500)]
    lines += [f"rank {r % (st.MAX_SERIES_RANKS + 100)}: 1.{r % 10} s/it" for r in range(st.MAX_SERIES_RANKS + 100)]
    lines += ["rank 3: 1.5 s/it"] * (st.MAX_SAMPLES * 3) + ["rank 4: 999999999.999999999 s/it"]
    lines += [f"h{h}: |   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |"
              for h in range(st.MAX_HOSTS + 50)]
    builder = VerdictBuilder(cat.version).add_all(cat.scan(lines))
    stalls = builder.stalls
    assert len(stalls._dumped) == st.MAX_GROUPS
    assert all(len(series) <= st.MAX_SERIES_RANKS for series in stalls._series.values())
    assert all(len(s) <= st.MAX_SAMPLES for series in stalls._series.values() for s in series.values())
    assert len(stalls._pending) <= st.MAX_HOSTS and len(stalls._gpus) <= st.MAX_HOSTS
    builder.build()  # and a verdict still comes out


def test_a_table_pasted_under_a_shell_prompt_belongs_to_the_prompts_host() -> None:
    # broke/before: hang with no culprit.
    v = classify_lines(["[root@gpu-b07 ~]# nvidia-smi", *smi_table([100, 100, 0, 100]), STUCK.format(r=0)])
    assert (v.culprit_kind, v.culprit, v.drain) == (CulpritKind.GPU, "gpu-b07 GPU 0000:38:00.0", False)


HOROVOD_WARNING = ("[1,0]<stderr>:[2021-04-10 21:28:20.658706: W horovod/common/stall_inspector.cc:105] One or "
                   "more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
                   "waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks "
                   "are trying to submit different tensors or that only subset of ranks is submitting tensors, "
                   "which will cause deadlock. ")
HOROVOD_SHUTDOWN = ('[1,0]<stderr>:One or more rank (marked by "!") is stalled for longer than 120 seconds. '
                    "Will shutdown.")


def test_horovods_stall_warning_alone_decides_nothing() -> None:
    # A lagging rank raises it too, and it clears by itself.
    v = classify_lines([HOROVOD_WARNING, "[1,0]<stderr>:Stalled ranks:", "[1,0]<stderr>:1: [HorovodAllreduce_grad_0]"])
    assert (v.category, v.restart, v.drain) == (Category.UNKNOWN, False, False)
    assert "horovod-stall-warning" in v.signatures


def test_horovods_stall_shutdown_is_the_programs_deadlock() -> None:
    v = classify_lines([HOROVOD_WARNING, "[1,0]<stderr>:Stalled ranks:", "[1,0]<stderr>:1!: [HorovodAllreduce_grad_0]",
                        HOROVOD_SHUTDOWN])
    assert (v.category, v.culprit_kind, v.restart, v.drain) == (Category.HANG, CulpritKind.APP, False, False)


def test_a_ranks_own_error_outranks_horovods_stall_shutdown() -> None:
    v = classify_lines([HOROVOD_WARNING, HOROVOD_SHUTDOWN,
                        "[1,1]<stderr>:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    assert v.category is Category.OOM
