"""Verdicts for network and fabric failures, each class resting on its vendor's documented meaning.

A fabric configuration fault (no EFA provider, a network plugin that cannot load, no interface
matching NCCL_SOCKET_IFNAME, verbs resources refused) fails the same way on every attempt and on
every node: network, never restarted, never drained, no host named (a host a line names is only
where it was seen). A port event is a link going down, not the HCA failing: it drains the host it
is tied to, and nobody when no line ties it to one. Lines are synthetic, in the format the vendor
prints.
"""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures.verdict import SOURCE_NODE
from goodput.models import Category, CulpritKind

N = "hx-{h}:2201:2250 [0] "
RETRY = (N + "transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer {peer}<52221> with status=12 "
         "opcode=0 len=0 vendor err 129 (Send)")

# (name, log, category, culprit kind, culprit, drain, restart)
CASES: list[tuple[str, list[str], Category, CulpritKind, str | None, bool, bool]] = [
    # ibv_get_async_event(3): a port event is the link; a CA event is the HCA.
    ("port-error-without-host-drains-nobody",
     ["NCCL WARN NET/IB : Got async event : port error"] * 3,
     Category.NETWORK, CulpritKind.NETWORK, None, False, True),
    ("port-error-with-two-peers-drains-nobody", [
        "...-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
        RETRY.format(h=51, peer="10.0.0.98"), RETRY.format(h=52, peer="10.0.0.97")],
     Category.NETWORK, CulpritKind.NETWORK, None, False, True),
    ("port-error-on-a-named-host-drains-it", [(N + "NCCL WARN NET/IB : mlx5_10:1 Got async event : port error")
                                              .format(h=7)],
     Category.NETWORK, CulpritKind.NODE, "hx-7", True, True),
    ("device-fatal-drains-the-source-node", ["NCCL WARN NET/IB : Got async event : device fatal"],
     Category.NETWORK, CulpritKind.NODE, SOURCE_NODE, True, True),
    ("gid-change-alone-is-no-failure", [(N + "NCCL WARN NET/IB : Got async event : GID table change").format(h=1)],
     Category.UNKNOWN, CulpritKind.UNKNOWN, None, False, False),
    # ibv_poll_cq(3): IBV_WC_RETRY_EXC_ERR is 12 whether or not NCCL names the peer.
    ("retry-exceeded-without-peer", ["-worker-1:946:988 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got "
                                     "completion with error 12, opcode 1, len 0, vendor err 129"],
     Category.NETWORK, CulpritKind.NETWORK, None, False, True),
    # ibv_poll_cq(3): a local access error is a protection error, like 4: configuration, not the link.
    ("local-access-error-is-configuration", [RETRY.format(h=1, peer="10.0.0.9").replace("status=12", "status=8")],
     Category.NETWORK, CulpritKind.NETWORK, "hx-1 <-> 10.0.0.9", False, False),
    # fi_getinfo(3): -FI_ENODATA, no EFA provider.
    ("ofi-plugin-finds-no-provider", [
        (N + "nccl_net_ofi_create_plugin:1067 NCCL WARN NET/OFI aws-ofi-nccl initialization failed").format(h=1),
        (N + "NCCL INFO NET/IB : No device found.").format(h=1),
        (N + "NCCL INFO NET/Socket : Using [0]eth0:10.1.2.9<0>").format(h=1)],
     Category.NETWORK, CulpritKind.NETWORK, None, False, False),
    ("fi-info-finds-no-efa", ["$ fi_info -p efa", "fi_getinfo: -61 (No data available)"],
     Category.NETWORK, CulpritKind.NETWORK, None, False, False),
    # Older OFI plugins word the same fi_getinfo result as "no optimal provider".
    ("ofi-legacy-plugin-finds-no-provider", [
        (N + "get_ofi_provider:312 NCCL WARN NET/OFI Could not find any optimal provider").format(h=1),
        (N + "find_ofi_provider:543 NCCL WARN NET/OFI Couldn't find any optimal provider").format(h=2)],
     Category.NETWORK, CulpritKind.NETWORK, None, False, False),
    # libfabric's efa_show_help(): 15 is configuration, 4126 a peer process that is gone.
    ("efa-unreachable-remote-is-configuration", [
        (N + "NCCL WARN NET/OFI Request 0x7f12 completed with error. RC: 113. Error: 15 (Unreachable remote "
             "(never received a response))").format(h=1)],
     Category.NETWORK, CulpritKind.NETWORK, None, False, False),
    ("efa-handshake-failed-is-a-consequence", [
        (N + "NCCL WARN NET/OFI Request 0x7f12 completed with error. RC: 103. Error: 4126 (Unresponsive receiver "
             "(reachable by EFA device but handshake failed))").format(h=1)],
     Category.NETWORK, CulpritKind.NETWORK, None, False, True),
    ("efa-handshake-failed-after-a-crash-blames-the-crash", [
        "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered",
        (N + "NCCL WARN NET/OFI Request 0x7f12 completed with error. RC: 103. Error: 4126 (Unresponsive receiver "
             "(reachable by EFA device but handshake failed))").format(h=1)],
     Category.APP_ERROR, CulpritKind.APP, "rank 3", False, False),
    ("libfabric-versions-disagree", [
        "libfabric:4411:1700000000::efa:cq:efa_rdm_pke_handle_rx_error():88<warn> err: 22, message: Invalid packet "
        "type received when zero copy recv mode is ON (4125)"],
     Category.NETWORK, CulpritKind.NETWORK, None, False, False),
    ("ofi-cannot-register-memory", [
        (N + "register_mr_buffers:544 NCCL WARN NET/OFI Unable to register memory (type = 2) for device 0. RC: -22, "
             "Error: Invalid argument").format(h=1)],
     Category.NETWORK, CulpritKind.NETWORK, None, False, False),
    ("verbs-out-of-locked-memory", [
        "[1668693503.473099] [hx-1:1188443:0]          ib_log.c:246  UCX  ERROR mlx5_0: ibv_create_cq() failed: "
        "Cannot allocate memory. Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 kbytes)"],
     Category.NETWORK, CulpritKind.NETWORK, "hx-1 HCA mlx5_0", False, False),
    # NCCL_NET_PLUGIN / NCCL_NET / NCCL_SOCKET_IFNAME: configuration of every rank.
    ("net-plugin-needs-a-newer-library", [
        (N + "NCCL INFO NET/Plugin: version 'EFA_1.4' not found").format(h=1)],
     Category.NETWORK, CulpritKind.NETWORK, None, False, False),
    ("forced-network-not-found-explains-invalid-usage", [
        (N + "net.cc:579 NCCL WARN Error: network gIB not found.").format(h=1),
        "torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp:1970, invalid usage"],
     Category.NETWORK, CulpritKind.NETWORK, None, False, False),
    ("no-interface-matches-socket-ifname", [
        "NCCL_SOCKET_IFNAME==enp90s0np0",
        (N + "NCCL WARN Bootstrap : no socket interface found").format(h=1),
        "torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp:1970, invalid usage"],
     Category.NETWORK, CulpritKind.NETWORK, None, False, False),
    # PyTorch's heartbeat monitor polling a store whose host already exited: teardown noise.
    ("store-poll-after-a-finished-run-is-no-failure", [
        "[rank1]:[W901 07:40:19.971184476 ProcessGroupNCCL.cpp:1826] [PG ID 0 PG GUID 0 Rank 1] Failed to check "
        'the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: '
        "Connection reset by peer"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, None, False, False),
    ("store-poll-does-not-hide-a-crash", [
        "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "[rank1]:[W901 07:40:19.971184476 ProcessGroupNCCL.cpp:1826] [PG ID 0 PG GUID 0 Rank 1] Failed to check "
        'the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: '
        "Connection reset by peer"],
     Category.APP_ERROR, CulpritKind.APP, "rank 0", False, False),
    # PyTorch's heartbeat monitor ends a process whose watchdog stopped beating: a hang.
    ("heartbeat-monitor-terminates-one-rank", [
        "[rank1]:[F919 07:00:13.418192812 ProcessGroupNCCL.cpp:1653] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
        "Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang."],
     Category.HANG, CulpritKind.UNKNOWN, None, False, True),
]


@pytest.mark.parametrize(("name", "log", "category", "kind", "culprit", "drain", "restart"), CASES,
                         ids=[c[0] for c in CASES])
def test_fabric_class(name: str, log: list[str], category: Category, kind: CulpritKind, culprit: str | None,
                      drain: bool, restart: bool) -> None:
    v = classify_lines(log)
    assert (v.category, v.culprit_kind, v.culprit, v.drain, v.restart) == (category, kind, culprit, drain, restart), (
        v.signatures, v.explanation)


@pytest.mark.parametrize(("line", "host"), [
    ("10.0.0.5:2201:2250 [0] NCCL WARN NET/IB : Got async event : port error", "10.0.0.5"),
    ("4u8g-gpu-01:2201:2250 [0] NCCL WARN NET/IB : Got async event : port error", "4u8g-gpu-01"),
])
def test_nccl_prefix_of_a_host_named_by_a_digit_or_an_ip(line: str, host: str) -> None:
    v = classify_lines([line])
    assert (v.culprit, v.drain) == (host, True), v.explanation


def test_a_time_stamp_is_not_a_numeric_host() -> None:
    from goodput.diagnose.signatures.prefixes import split_prefix

    assert split_prefix("2026-11-29 07:41:02 [0] NCCL WARN NET/IB : Got async event : port error")[0].host is None
    assert split_prefix("12:30:01 [0] NCCL INFO Init COMPLETE")[0].host is None


def test_supersedes_must_name_known_rules() -> None:
    from goodput.diagnose.signatures import Catalogue, default_catalogue

    sig = default_catalogue().get("nccl-store-poll-after-teardown").model_copy(update={"supersedes": ("no-such",)})
    with pytest.raises(ValueError, match="no-such"):
        Catalogue([sig])


def test_ucx_prefix_names_the_host() -> None:
    from goodput.diagnose.signatures.prefixes import split_prefix

    context, body = split_prefix("[1608298882.555115] [b2294:54275:0]          ib_md.c:1678 UCX  ERROR "
                                 "ibv_open_device(mlx5_0) failed: Cannot allocate memory")
    assert context.host == "b2294"
    assert body.startswith("ib_md.c:1678 UCX")


def test_every_fabric_rule_names_its_source() -> None:
    from goodput.diagnose.signatures import default_catalogue

    fabric = [s for s in default_catalogue().signatures
              if s.family == "rdma" or s.id.startswith(("nccl-ib-", "nccl-net-", "nccl-socket-no"))]
    assert len(fabric) >= 14
    assert [s.id for s in fabric if not s.source] == []
