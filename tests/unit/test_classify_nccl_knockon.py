"""Verdicts for NCCL errors that name a layer, not a culprit: each class rests on NCCL's own meaning.

ncclSystemError is "a call to the system failed" (NCCL's API types; its troubleshooting guide: a
call to an external library failed, read the WARN line): the node's environment, not the network,
unless the WARN lines around it name a link. ncclRemoteError is "a network error or a remote
process exiting prematurely": with the peer on the printing host itself no network lies between
them, so a process of that node died first. NCCL's proxy logs every local rank that closes its
connection at INFO level, at a normal end as much as after a failure: not a failure on its own.
NCCL picks loopback or a container bridge for its sockets only when no other interface is there
(or NCCL_SOCKET_IFNAME asks), and Gloo binds to loopback when the host's name does not resolve to a
local address: a network failure between hosts then is that configuration, which a restart repeats.
libfabric's EFA provider reads an invalid receiver queue pair number as a crashed peer: the peer's own
failure decides. PyTorch's store client logs its connection problems at WARNING while it retries (a
server not yet listening, a connect attempt reset): noise until the store itself gives up. A shell
prompt that shows `host:dir$` without a user still names the host of what follows. Lines
are synthetic, in the format NCCL, PyTorch and bash print.
"""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.models import Category, CulpritKind

N = "{h}:2201:2250 [0] "
SYSTEM = ("torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/"
          "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), "
          "NCCL version 2.21.5")
CLOSED = N + "misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer {peer}<47861>"
BOOTSTRAP = N + "NCCL INFO Bootstrap : Using eth0:{ip}<0>"
LOCAL = N + "NCCL INFO [Service thread] Connection closed by localRank {r}"
IFACE = N + "NCCL INFO {what} : Using {iface}<0>"
EFA_QPN = (N + "process_err_completion:1562 NCCL WARN NET/OFI Request 0x7f08c0001d30 completed with error. RC: 5. "
           "Error: Invalid receiver queue pair number (QPN) My EFA addr: fi_addr_efa://[fe80::30:43ff:fe60:456b]:0:"
           "657145598")

# (name, log, category, culprit kind, restart, drain)
CASES: list[tuple[str, list[str], Category, CulpritKind, bool, bool]] = [
    # ncclSystemError alone: the environment refused a call; no network named, no blind restart.
    ("system-error-alone", [SYSTEM], Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("system-error-by-name", [(N + "NCCL WARN init.cc:1500 -> ncclSystemError").format(h="hx-1")],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("system-error-with-topology-warn", [
        "graph/xml.cc:332 NCCL WARN Could not find real path of /sys/class/pci_bus/fffffff/../../fffffff:ff:f",
        "NCCL error: unhandled system error"], Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    # The WARN line says which call failed: a shared-memory segment, the container's /dev/shm.
    ("system-error-with-shm-warn", [
        (N + "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-1Q2w (size 9637888)").format(h="hx-1"),
        SYSTEM], Category.APP_ERROR, CulpritKind.APP, False, False),
    # The WARN lines name a link to another host: the network decides, as before.
    ("system-error-after-a-closed-socket", [CLOSED.format(h="hx-1", peer="hx-7"), SYSTEM],
     Category.NETWORK, CulpritKind.NETWORK, True, False),
    # ncclRemoteError is still the network (or a remote process): unchanged.
    ("remote-error-is-still-network", [
        "RuntimeError: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5"],
     Category.NETWORK, CulpritKind.NETWORK, True, False),
    # A socket closed by a peer on the printing host itself: a local process died first.
    ("peer-is-the-same-host", [CLOSED.format(h="a100-st-22", peer="a100-st-22.cluster.internal")],
     Category.APP_ERROR, CulpritKind.APP, True, False),
    ("peer-is-the-same-host-by-address", [BOOTSTRAP.format(h="hx-1", ip="10.0.0.11"),
                                          CLOSED.format(h="hx-1", peer="10.0.0.11")],
     Category.APP_ERROR, CulpritKind.APP, True, False),
    ("peer-is-another-host", [CLOSED.format(h="hx-1", peer="hx-2.cluster.internal")],
     Category.NETWORK, CulpritKind.NETWORK, True, False),
    ("peer-is-another-host-by-address", [BOOTSTRAP.format(h="hx-1", ip="10.0.0.11"),
                                         BOOTSTRAP.format(h="hx-2", ip="10.0.0.12"),
                                         CLOSED.format(h="hx-1", peer="10.0.0.12")],
     Category.NETWORK, CulpritKind.NETWORK, True, False),
    # Two addresses are not one host because their first octets agree.
    ("peer-address-shares-only-a-prefix", [CLOSED.format(h="10.0.0.11", peer="10.0.0.12")],
     Category.NETWORK, CulpritKind.NETWORK, True, False),
    # NCCL's sockets on loopback or a container bridge: a failure between hosts is configuration.
    ("loopback-then-peer-lost", [IFACE.format(h="hx-1", what="Bootstrap", iface="lo:127.0.0.1"),
                                 CLOSED.format(h="hx-1", peer="hx-2")],
     Category.NETWORK, CulpritKind.NETWORK, False, False),
    ("docker-bridge-then-peer-lost", [IFACE.format(h="hx-1", what="NET/Socket", iface="[0]docker0:172.17.0.1"),
                                      "RuntimeError: NCCL error: remote process exited or there was a network error"],
     Category.NETWORK, CulpritKind.NETWORK, False, False),
    ("container-veth-then-peer-lost", [
        IFACE.format(h="hx-1", what="NET/Socket", iface="[0]ens5:10.1.0.7<0> [1]veth1a2b3c4:172.18.0.2"),
        "RuntimeError: NCCL error: remote process exited or there was a network error"],
     Category.NETWORK, CulpritKind.NETWORK, False, False),
    ("loopback-alone-is-no-failure", [IFACE.format(h="hx-1", what="Bootstrap", iface="lo:127.0.0.1")],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    # Gloo bound to loopback because the host name did not resolve (PyTorch's own warning), then a
    # peer refused: the same configuration class, which a restart repeats.
    ("gloo-loopback-then-refused", [
        "[rank8] Warning: Unable to resolve hostname to a (local) address. Using the loopback address as "
        "fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME.",
        "RuntimeError: Gloo connectFullMesh failed: timed out connecting: SO_ERROR: Connection refused, "
        "remote=[127.0.0.1]:14215"], Category.NETWORK, CulpritKind.NETWORK, False, False),
    ("gloo-loopback-alone-is-no-failure", [
        "[rank0] Warning: Unable to resolve hostname to a (local) address. Using the loopback address as "
        "fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME."],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("fabric-interface-then-peer-lost", [IFACE.format(h="hx-1", what="Bootstrap", iface="eth0:10.0.0.1"),
                                         CLOSED.format(h="hx-1", peer="hx-2")],
     Category.NETWORK, CulpritKind.NETWORK, True, False),
    # The proxy's INFO line when a local rank disconnects: printed at every end, not a failure.
    ("local-rank-closed-alone", [LOCAL.format(h="hx-1", r=3), LOCAL.format(h="hx-1", r=1)],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("local-rank-closed-after-an-exception", [
        "[rank3]: Traceback (most recent call last):", "[rank3]: ValueError: bad shape (3, 4)",
        LOCAL.format(h="hx-1", r=3)], Category.APP_ERROR, CulpritKind.APP, False, False),
    # libfabric's EFA provider: an invalid receiver QPN is typically a crashed peer (efa_strerror.c): the peer's
    # own failure decides; alone it settles nothing and restarts nothing.
    ("efa-invalid-qpn-alone", [EFA_QPN], Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("efa-invalid-qpn-after-the-peer-was-oom-killed", [
        "[Thu Dec  3 10:41:02 2026] Out of memory: Killed process 4411 (python3) total-vm:81234567kB, "
        "anon-rss:7990000kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:16000kB oom_score_adj:0",
        EFA_QPN], Category.OOM, CulpritKind.APP, False, False),
    # c10d's store client warns and retries while it connects (socket.cpp, TCPStore.cpp): noise.
    ("store-server-not-yet-listening", [
        "[W socket.cpp:634] The server socket on [localhost]:29501 is not yet listening (errno: 111 - "
        "Connection refused)."], Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("store-connect-retried", [
        "[W506 00:43:56.240378877 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=3, "
        "addr=[hx-1.cm.example.com]:47466, remote=[hx-1.cm.example.com]:29500): Connection reset by peer",
        "[W506 00:43:56.241 TCPStore.cpp:347] [c10d] TCP client failed to connect/validate to host hx-1:29500 - "
        "retrying (try=0, timeout=1800000ms, delay=487ms): Connection reset by peer"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    # The store giving up is an error of its own: still decided as before.
    ("store-unreachable-after-retries", [
        "[W socket.cpp:634] The server socket on [hx-9]:29501 is not yet listening (errno: 111 - Connection "
        "refused).",
        "[E socket.cpp:860] [c10d] The client socket has failed to connect to any network address of (hx-9, 29501)."],
     Category.APP_ERROR, CulpritKind.APP, False, False),
]


@pytest.mark.parametrize(("name", "log", "category", "kind", "restart", "drain"), CASES, ids=[c[0] for c in CASES])
def test_nccl_knock_on_class(name: str, log: list[str], category: Category, kind: CulpritKind, restart: bool,
                             drain: bool) -> None:
    lines = [line.format(h="hx-1") if "{h}" in line else line for line in log]
    v = classify_lines(lines)
    assert (v.category, v.culprit_kind, v.restart, v.drain) == (category, kind, restart, drain), (
        v.signatures, v.explanation)


def test_a_same_host_peer_is_never_a_confident_verdict() -> None:
    v = classify_lines([CLOSED.format(h="hx-1", peer="hx-1")])
    assert "nccl-peer-on-same-host" in v.signatures
    assert str(v.confidence) != "high"


# (prompt line, host it names or None); the output line after it is an Xid on that host's GPU.
PROMPTS: list[tuple[str, str | None]] = [
    ("hoth:~$ lspci | grep -i nvidia", "hoth"),
    ("gpu-a07:/var/log# dmesg -T", "gpu-a07"),
    ("node17:~/runs% ls", "node17"),
    ("https://example.org/docs# see below", None),  # a URL is no prompt
    ("Note: the cost is $ 5", None),
    ("C:/Users$ dir", None),  # a drive letter is not a host
]


@pytest.mark.parametrize(("prompt", "host"), PROMPTS, ids=[p[0] for p in PROMPTS])
def test_a_prompt_without_a_user_names_its_host(prompt: str, host: str | None) -> None:
    v = classify_lines([prompt, "NVRM: Xid (PCI:0000:1c:00): 79, pid=1234, GPU has fallen off the bus."])
    assert v.category is Category.GPU_HARDWARE
    assert v.host == host, v.explanation


def test_a_container_interface_is_named_as_one_nccl_picks_by_default() -> None:
    sockets = IFACE.format(h="hx-1", what="NET/Socket", iface="[0]ens5:10.1.0.7<0> [1]br-5d1e0c9a77f2:172.19.0.1")
    v = classify_lines([sockets, "RuntimeError: NCCL error: remote process exited or there was a network error"])
    assert not v.restart
    assert "br-5d1e0c9a77f2" in v.explanation and "does not exclude by default" in v.explanation


def test_a_truncated_socket_message_is_the_ranks_disagreeing_never_high() -> None:
    """NCCL's own reading (net_socket.cc): unless the network is broken, the ranks disagree on a
    collective's size or on NCCL_PROTO / NCCL_ALGO."""
    v = classify_lines([
        "node1:41:59 [0] transport/net_socket.cc:636 NCCL WARN NET/Socket : peer 10.0.0.2<43521> message truncated : "
        "receiving 1048576 bytes instead of 65536. If you believe your socket network is in a healthy state, there "
        "may be a mismatch in collective sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks",
        "node1:41:59 [0] NCCL INFO transport/net.cc:1214 -> 5",
        "RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"])
    assert (str(v.category), v.restart, v.drain) == ("app-error", False, False)
    assert v.confidence != "high"


def test_nccls_configuration_refusals_restart_nothing_and_drain_nothing() -> None:
    """Mismatched NCCL versions across ranks, NICs of two link layers joined, a multi-node NVLink
    domain without its IMEX channel: each fails the same way on every attempt (NCCL's own texts)."""
    for line in ("node1:41:59 [0] init.cc:1043 NCCL WARN Mismatched NCCL version detected : rank 0 version 22304 "
                 "rank 3 version 22105",
                 "node1:41:59 [0] NCCL WARN NET/IB : Attempted to connect incompatible devices: [0]mlx5_0:1/IB and "
                 "[1]mlx5_4:1/RoCE. Try selecting NICs of only one link type using NCCL_IB_HCA",
                 "node1:41:59 [0] NCCL WARN MNNVL (cliqueSize 18) is available but not working on this system. Check "
                 "the IMEX channel configuration (/dev/nvidia-caps-imex-channels)."):
        v = classify_lines([line, "RuntimeError: NCCL error: unhandled system error"])
        assert (v.restart, v.drain) == (False, False), (line, v.signatures)


def test_pytorch_names_the_rank_whose_error_the_others_abort_for() -> None:
    """The watchdog's remote-error signal and the ncclUniqueId broadcast both name the rank that
    failed first (ProcessGroupNCCL.cpp); the ranks that print it are its knock-ons."""
    remote = classify_lines([f"[rank{r}]:[E1203 10:00:00.000000 41 ProcessGroupNCCL.cpp:1690] [PG ID 0 PG GUID "
                             f"0(default_pg) Rank {r}]  remote error detected from rank: 5" for r in (0, 1, 2)])
    assert (remote.culprit_kind, remote.rank, remote.restart, remote.drain) == ("rank", 5, True, False)
    root = classify_lines(["torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving "
                           "ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: "
                           "wait timeout after 600000ms, keys: /default_pg//0"])
    assert (root.rank, root.restart) == (0, True)


def test_a_store_barrier_that_times_out_is_a_worker_that_never_joined_not_the_program() -> None:
    v = classify_lines(["Traceback (most recent call last):",
                        "torch.distributed.DistStoreError: Timed out initializing process group in store based barrier "
                        "on rank 3, for key: store_based_barrier_key:1 (world_size=16, num_workers_joined=15, "
                        "timeout=0:30:00, error=Wait timeout)"])
    assert (str(v.category), v.restart, v.drain) == ("node-failure", True, False)
    assert v.confidence != "high"
