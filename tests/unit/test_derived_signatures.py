"""The live service reads a verdict's signatures as `goodput classify` wrote them (#25).

The verdict builder writes some signatures from several lines (a recurring Xid, a driver hang,
Megatron's verdict on the GPU it suspected). The service's attribution looks every id of an
anomaly up in the catalogue; those ids were in none, so it decided from a weaker one: it kept a
node `classify` drained, or drained one `classify` cleared."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from benchmarks.diagnosis import CORPUS, load_corpus
from goodput.diagnose.attribution import attribute
from goodput.diagnose.classify import anomaly_from_verdict, classify_lines
from goodput.diagnose.signatures import Catalogue, default_catalogue
from goodput.diagnose.signatures.derived import BUILDERS, derived_signatures
from goodput.diagnose.signatures.model import Signature
from goodput.scheduler import JobInfo, JobState

NOW = datetime(2026, 12, 5, tzinfo=UTC)

MEGATRON_PERSISTENT = """\
Rank 3, node gpu-node-017, device 3, iteration #1201: First rerun: unexpected result is reproducible within the tolerance (nan = nan). Need to rerun on a different GPU to verify correctness.!
Saving a checkpoint and exiting now. Please resume the job from the checkpoint to rerun the last iteration and establish a diagnostic
Second rerun: unexpected result is not reproducible on a different GPU, therefore was likely incorrect (1.2 != nan)
Rank 3, node gpu-node-022, device 5, iteration #1201: Possible persistent error!!
"""  # noqa: E501


def xid31(addresses: list[str]) -> str:
    """Xid 31 on one GPU under a process each, faulting at `addresses`."""
    return "".join(
        f"[Mon Dec  1 10:00:0{i} 2026] NVRM: Xid (PCI:0000:1b:00): 31, pid={4101 + i}, name=python, Ch 00000008, "
        f"intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ {address}. Fault is of type "
        "FAULT_PDE ACCESS_TYPE_VIRT_READ\n" for i, address in enumerate(addresses))


def decided(log: str, nodes: tuple[str, ...]) -> tuple[tuple[object, ...], tuple[object, ...]]:
    verdict = classify_lines(log.splitlines())
    anomaly = anomaly_from_verdict(verdict, anomaly_id="a", job_id="5", observed_at=NOW, detected_at=NOW,
                                   host=nodes[0])
    attribution = attribute([anomaly], JobInfo(job_id="5", state=JobState.RUNNING, nodes=nodes))
    return ((verdict.category, verdict.drain, verdict.restart),
            (attribution.category, attribution.drain, attribution.restart))


def test_megatrons_persistent_error_drains_the_suspect_in_the_service_too() -> None:
    said, done = decided(MEGATRON_PERSISTENT, ("gpu-node-017", "gpu-node-022"))
    assert said == done and said[1] is True
    anomaly = anomaly_from_verdict(classify_lines(MEGATRON_PERSISTENT.splitlines()), anomaly_id="a", job_id="5",
                                   observed_at=NOW, detected_at=NOW)
    attribution = attribute([anomaly], JobInfo(job_id="5", state=JobState.RUNNING,
                                               nodes=("gpu-node-017", "gpu-node-022")))
    assert attribution.culprit_nodes == ("gpu-node-017",)
    assert attribution.rule == "megatron-persistent-error-on-suspect"


@pytest.mark.parametrize(("addresses", "rule", "drain"), [
    (["0x7f12_34560000"] * 3, "xid-31-same-address", False),  # one program's deterministic fault
    (["0x7f12_34560000", "0x7f99_00001000", "0x7e00_12340000"], "xid-app-recurring", True),  # the GPU's
])
def test_xid_31_under_several_processes_is_decided_by_the_service_as_by_classify(
        addresses: list[str], rule: str, drain: bool) -> None:
    log = xid31(addresses)
    assert rule in classify_lines(log.splitlines()).signatures
    said, done = decided(log, ("node7",))
    assert said == done and said[1] is drain


def test_every_derived_signature_is_known_to_the_catalogue_and_matches_no_line() -> None:
    catalogue = default_catalogue()
    derived = derived_signatures()
    assert {"megatron-persistent-error-on-suspect", "gpu-driver-hang", "xid-31-same-address"} <= {
        s.id for s in derived}
    assert all(catalogue.get(s.id) is s for s in derived)
    assert not {s.id for s in derived} & {s.id for s in catalogue.signatures}
    assert all(s.id not in {m.signature.id for m in catalogue.match_line(s.literals[0])} for s in derived)
    for module in BUILDERS:  # a signature a builder defines is derived whatever its variable's name
        assert all(v in derived for v in vars(module).values() if isinstance(v, Signature))


def test_a_derived_signature_may_not_take_a_catalogue_id() -> None:
    [one] = [s for s in derived_signatures() if s.id == "gpu-driver-hang"]
    with pytest.raises(ValueError, match="reuse catalogue ids"):
        Catalogue([one], derived=[one])


def test_every_id_a_training_verdict_names_is_one_the_service_can_read() -> None:
    catalogue = default_catalogue()
    unknown = {}
    for excerpt in load_corpus():
        if excerpt.fold != "train":
            continue
        verdict = classify_lines((CORPUS / excerpt.file).read_text(errors="replace").splitlines())
        missing = [i for i in verdict.signatures if catalogue.get(i) is None]
        if missing:
            unknown[excerpt.id] = missing
    assert unknown == {}


LOOPBACK = [  # Gloo bound to loopback: every attempt fails the same way until the host name resolves
    "[rank8] Warning: Unable to resolve hostname to a (local) address. Using the loopback address as fallback. "
    "Manually set the network interface to bind to with GLOO_SOCKET_IFNAME.",
    "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] timed out "
    "connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:14215",
]


def test_a_fabric_configuration_fault_is_not_restarted_by_the_service_either() -> None:
    verdict = classify_lines(LOOPBACK)
    assert verdict.held_back is not None and not verdict.restart  # the verdict holds the restart back
    said, done = decided("\n".join(LOOPBACK), ("hx-1", "hx-2"))
    assert said == done and done[2] is False
    anomaly = anomaly_from_verdict(verdict, anomaly_id="a", job_id="5", observed_at=NOW, detected_at=NOW)
    assert "GLOO_SOCKET_IFNAME" in attribute([anomaly]).explanation


def test_on_the_training_fold_the_service_decides_as_classify_does() -> None:
    differ = {}
    for excerpt in load_corpus():
        if excerpt.fold != "train":
            continue
        log = (CORPUS / excerpt.file).read_text(errors="replace")
        verdict = classify_lines(log.splitlines())
        if verdict.category.value == "unknown":
            continue
        said, done = decided(log, tuple(n for n in (verdict.host, "source-node") if n))
        if said != done:
            differ[excerpt.id] = (said, done)
    assert differ == {}
