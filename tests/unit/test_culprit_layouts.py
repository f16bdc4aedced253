"""Culprits from layouts the catalogue never listed: hosts by shape, addresses by the pairs a log states.

Generated logs: a host spelled as a pod, a cloud instance, a site's numbered node or an address,
behind one of the prefixes launchers and log collectors write, among healthy lines of other hosts
that carry decoys (checkpoint paths, model names, versions). The verdict must name the failing
host (and its GPU or HCA), and never a host made from a token that is not a machine's name.
"""

from __future__ import annotations

import gc
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue, hostshape, split_prefix
from goodput.diagnose.signatures.naming import rank_list

CAT = default_catalogue()
XID = "NVRM: Xid (PCI:0000:{pci}:00): 79, pid=4242, name=python, GPU has fallen off the bus."
IB = ("NCCL WARN NET/IB : Got completion from peer {peer}<43210> with status=12 opcode=0 len=0 vendor err 129 "
      "(Send) localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2 hca {hca}")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---- host spellings -------------------------------------------------------------------------------
_word = st.sampled_from(["trainer", "worker", "job", "llm", "pretrain", "team", "master", "launcher"])
_alnum = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=5, max_size=5).filter(
    lambda s: s[0].isalpha() and any(c.isdigit() for c in s))
_octet = st.integers(0, 255)
_n = st.integers(0, 999)
pod = st.one_of(
    st.builds(lambda a, b, n: f"{a}-{b}-{n}", _word, _word, _n),
    st.builds(lambda a, h, n: f"{a}-{h}-master-{n}", _word, _alnum, _n))
cloud = st.one_of(
    st.builds(lambda a, b, c, d: f"ip-{a}-{b}-{c}-{d}", _octet, _octet, _octet, _octet),
    st.builds(lambda a, b, c, d: f"ip-{a}-{b}-{c}-{d}.ec2.internal", _octet, _octet, _octet, _octet),
    st.builds(lambda n: f"a3-highgpu-8g-{n}", _n))
site = st.one_of(
    st.builds(lambda r, n: f"hgx-b200-r{r:02d}-n{n:02d}", st.integers(0, 99), st.integers(0, 99)),
    st.builds(lambda n: f"nid{n:06d}", st.integers(0, 999999)),
    st.builds(lambda n: f"gpu-a100-{n:03d}", _n),
    st.builds(lambda p, n: f"{p}{n:03d}", st.sampled_from(["node", "cn", "gn", "sierra", "dgx"]), _n))
address = st.builds(lambda a, b, c, d: f"{a}.{b}.{c}.{d}", st.integers(1, 255), _octet, _octet, st.integers(1, 254))
host = st.one_of(pod, cloud, site, address)
named_host = st.one_of(pod, cloud, site)  # hosts a pair can name (an address is what it names)

# Tokens that are not machines' names, spelled where a host prefix would be.
decoy = st.one_of(
    st.builds(lambda m, a, b: f"{m}-{a}-{b}b", st.sampled_from(["llama", "qwen", "gpt-neox", "falcon"]),
              st.integers(1, 4), st.integers(1, 405)),
    st.builds(lambda a, b, c: f"{a}.{b}.{c}", st.integers(0, 20), st.integers(0, 20), st.integers(0, 20)),
    st.builds(lambda s: f"/ckpt/run-7/step-{s}", st.integers(0, 10**6)),
    st.sampled_from(["RuntimeError", "torch.distributed.run", "rank3", "mlx5", "nvme0", "e1000e", "eth0",
                     "cuda-12.1", "python3", "v2.4.0", "INFO", "Epoch"]))


def prefixed(fmt: str, name: str, rank: int) -> str:
    return {
        "colon": f"{name}: ",
        "compose": f"{name}  | ",
        "nccl": f"{name}:4123:4150 [{rank % 8}] ",
        "syslog": f"Nov 29 09:00:01 {name} kernel: ",
        "srun": f"{rank}: {name}: ",
        "torchrun": f"{name}: [rank{rank}]: ",
    }[fmt]


FORMATS = ["colon", "compose", "nccl", "syslog", "srun", "torchrun"]
fmt = st.sampled_from(FORMATS)


def healthy(name: str, form: str, rank: int, junk: str) -> str:
    return prefixed(form, name, rank) + f"step 1200 | loss 2.31 | saved {junk}"


def interleave(data: st.DataObject, failing: list[str], others: list[str]) -> list[str]:
    """The failing host's lines in order, the healthy lines of others shuffled in between."""
    slots = data.draw(st.lists(st.integers(0, len(failing)), min_size=len(others), max_size=len(others)))
    lines: list[str] = []
    for i, line in enumerate(failing):
        lines += [o for o, s in zip(others, slots, strict=True) if s == i]
        lines.append(line)
    return lines + [o for o, s in zip(others, slots, strict=True) if s == len(failing)]


# ---- properties ---------------------------------------------------------------------------------
@SETTINGS
@given(host, st.lists(host, max_size=6), fmt, st.integers(0, 255), st.integers(0, 63), decoy, st.data())
def test_a_gpu_fault_names_its_host_and_gpu_whatever_the_spelling_and_prefix(
        name: str, others: list[str], form: str, bus: int, rank: int, junk: str, data: st.DataObject) -> None:
    others = [o for o in others if o != name]
    pci = f"{bus:02x}"
    lines = interleave(data, [prefixed(form, name, rank) + XID.format(pci=pci)],
                       [healthy(o, form, i, junk) for i, o in enumerate(others)])
    verdict = classify_lines(lines)
    assert (verdict.host, verdict.gpu) == (name, f"0000:{pci}:00"), (lines, verdict.culprit)
    assert verdict.drain


@SETTINGS
@given(host, host, fmt, st.sampled_from(["mlx5_0", "mlx5_10", "mlx5_bond_0", "mlx4_1"]), decoy, st.data())
def test_a_link_fault_names_its_host_and_hca(name: str, other: str, form: str, hca: str, junk: str,
                                             data: st.DataObject) -> None:
    lines = interleave(data, [prefixed(form, name, 3) + IB.format(peer="10.9.8.7", hca=hca)],
                       [healthy(other, form, 1, junk)] if other != name else [])
    verdict = classify_lines(lines)
    assert verdict.host == name
    assert verdict.culprit is not None and f"{name} HCA {hca}" in verdict.culprit


@SETTINGS
@given(named_host, address, st.sampled_from(["colon", "nccl"]), st.integers(0, 255))
def test_an_address_is_named_by_the_host_the_log_pairs_it_with(name: str, ip: str, form: str, bus: int) -> None:
    lines = [f"{name}:4123:4150 [0] NCCL INFO Bootstrap : Using eth0:{ip}<0>",
             prefixed(form, ip, 0) + XID.format(pci=f"{bus:02x}")]
    assert classify_lines(lines).host == name


@SETTINGS
@given(decoy, fmt, st.integers(0, 255))
def test_no_host_is_made_from_a_token_that_is_not_a_machine(junk: str, form: str, bus: int) -> None:
    line = f"{junk}: " + XID.format(pci=f"{bus:02x}")
    assert split_prefix(line)[0].host is None
    verdict = classify_lines([f"{junk}: step 7 | loss 2.0", line])
    assert verdict.host is None
    assert not hostshape.numbered_machine(junk)


@SETTINGS
@given(host)
def test_every_generated_host_has_a_machines_shape(name: str) -> None:
    assert hostshape.host_shaped(name)
    assert hostshape.numbered_machine(name)


# ---- documented layouts, one each -----------------------------------------------------------------
@pytest.mark.parametrize(("line", "host"), [
    # pdsh/clush `host: ` with any follower; talosctl dmesg's `address: kern: level: [time]: `.
    ("node017: " + XID.format(pci="3b"), "node017"),
    ("192.168.11.119: kern: warning: [2026-04-22T21:27:51.29Z]: " + XID.format(pci="3b"), "192.168.11.119"),
    # docker compose logs, kubectl logs --prefix.
    ("trainer-worker-3  | " + XID.format(pci="3b"), "trainer-worker-3"),
    ("[pod/job-abc12-master-0/pytorch] " + XID.format(pci="3b"), "job-abc12-master-0"),
    # A syslog record quoted by an alert forwarder.
    ("Xid errors on instance: ip-26-0-147-135, Error: May 29 01:37:38 ip-26-0-147-135 kernel: [257087.812628] "
     + XID.format(pci="90"), "ip-26-0-147-135"),
    # Not hosts: an exception, a logger, a rank, a driver, a model, a version.
    ("RuntimeError: " + XID.format(pci="3b"), None),
    ("torch.distributed.run: " + XID.format(pci="3b"), None),
    ("rank3: " + XID.format(pci="3b"), None),
    ("mlx5: " + XID.format(pci="3b"), None),
    ("llama-3-70b: " + XID.format(pci="3b"), None),
    ("2.4.0: " + XID.format(pci="3b"), None),
])
def test_layouts_name_the_host(line: str, host: str | None) -> None:
    assert classify_lines([line]).host == host


def test_kubectl_describe_pod_names_the_pods_node() -> None:
    verdict = classify_lines([
        "Name:             trainer-0", "Node:             gpu-a100-017/10.0.3.17", "Status:           Failed",
        "Reason:           Evicted",
        "Message:          The node was low on resource: memory. Threshold quantity: 1Gi, available: 991045Ki."])
    assert verdict.host == "gpu-a100-017"


def test_a_peer_address_is_named_by_its_bootstrap_line() -> None:
    verdict = classify_lines(["node018:4123:4150 [0] NCCL INFO Bootstrap : Using eth0:10.0.3.18<0>",
                              "node017:4123:4150 [3] " + IB.format(peer="10.0.3.18", hca="mlx5_10")])
    assert verdict.culprit == "node017 HCA mlx5_10 <-> node018 (10.0.3.18)"


def test_an_address_is_ec2s_ip_name_when_the_log_shows_that_host() -> None:
    verdict = classify_lines([
        "ip-10-0-3-17:4123:4150 [0] NCCL INFO comm 0x5 rank 1 nranks 2 cudaDev 0 busId 3b000 commId 0x1 - "
        "Init COMPLETE",
        "10.0.3.17: " + XID.format(pci="3b")])
    assert verdict.host == "ip-10-0-3-17"


def test_rank_ranges() -> None:
    assert rank_list("8-15") == (["8-15"], 8)
    assert rank_list("3, 8-15") == (["3", "8-15"], 3)
    assert rank_list("15-8") == ([], None)


# ---- linear time, by construction ------------------------------------------------------------------
# Up to 60 KB of tokens each prefix or shape rule could start on; the matcher caps a line at 64 KiB.
ADVERSARIAL = ["node017: " * 6000, "ip-10-1-2-3.ec2.internal " * 2000, "a1-" * 19000 + ": ",
               "[pod/" + "a" * 59000 + "/c] ", "mlx5_0:1 " * 6000, "Nov 29 09:00:01 " * 3500 + "kernel: "]


@pytest.mark.parametrize("line", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_lines_are_bounded_and_classified_like_short_ones(line: str) -> None:
    tail = XID.format(pci="3b")
    plain = sorted(m.signature.id for m in CAT.match_line(tail, 1))
    assert sorted(m.signature.id for m in CAT.match_line(line + tail, 1)) == plain
    assert len(hostshape.hcas(line)) <= hostshape.MAX_HCAS
    assert not hostshape.host_shaped(line)
    assert split_prefix(line)[0].host in (None, "node017")


def test_hostshape_runs_no_backtracking_pattern() -> None:
    roots = [v for k, v in vars(hostshape).items() if not k.startswith("__")]
    assert not any(isinstance(o, re.Pattern) for r in roots for o in gc.get_referents(r))
    assert isinstance(hostshape.HCA, hostshape.LinearRegex)
