"""The patch table in docs/architecture.md (#retiring-patches) against the code and the replay corpus.

The table lists every `workflow.patched` id the workflows use, and for each RecoveryWorkflow id
which recorded histories predate it and which take it. Both history columns are proven here: a
history predates an id when it no longer replays with the id's branch forced (what
`workflow.deprecate_patch` and deleting the old branch would do), and takes it when its patch
marker is recorded. So retiring a branch, a history or an id cannot leave the table wrong.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.recovery import RecoveryWorkflow
from workflows.recovery_steps import PATCHES_ASKED_FIRST

ROOT = Path(__file__).resolve().parents[2]
HISTORIES = Path(__file__).parent / "histories"
PATCH_CALL = re.compile(r"""workflow\.(?:patched|deprecate_patch)\(\s*["']([^"']+)["']""")


def _table() -> dict[str, list[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Retiring patches\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def _names(cell: str) -> set[str]:
    return {n.strip() for n in cell.split(",")} - {"—", ""}


def _ids_in_code() -> set[str]:
    return {m for path in (ROOT / "workflows").rglob("*.py") for m in PATCH_CALL.findall(path.read_text())}


TABLE = _table()
RECOVERY_IDS = sorted(i for i, cells in TABLE.items() if cells[0] == "RecoveryWorkflow")


def test_the_table_lists_exactly_the_patch_ids_the_workflows_use() -> None:
    assert set(TABLE) == _ids_in_code()


@contextmanager
def _forced(patch_id: str) -> Iterator[None]:
    """`patch_id`'s branch taken unconditionally, as after its old branch is deleted."""
    patched, deprecate = workflow.patched, workflow.deprecate_patch

    def forced(id: str, **kwargs: object) -> bool:
        if id == patch_id:
            deprecate(id)
            return True
        return patched(id, **kwargs)  # type: ignore[arg-type]

    workflow.patched = forced  # type: ignore[assignment]
    try:
        yield
    finally:
        workflow.patched = patched


def _taken(path: Path) -> set[str]:
    """The patch ids whose markers a history recorded."""
    found = set()
    for event in json.loads(path.read_text())["events"]:
        marker = event.get("markerRecordedEventAttributes", {})
        if marker.get("markerName") == "core_patch":
            for payload in marker["details"]["patch-data"]["payloads"]:
                found.add(str(json.loads(base64.b64decode(payload["data"]))["id"]))
    return found


@pytest.mark.parametrize("patch_id", RECOVERY_IDS)
async def test_the_histories_that_predate_and_take_each_patch(patch_id: str) -> None:
    replayer = Replayer(workflows=[RecoveryWorkflow], data_converter=pydantic_data_converter)
    predate = set()
    with _forced(patch_id):
        for path in sorted(HISTORIES.glob("*.json")):
            history = WorkflowHistory.from_json(path.stem, path.read_text())
            replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            if replayed.replay_failure is not None:
                predate.add(path.stem)
    takes = {p.stem for p in HISTORIES.glob("*.json") if patch_id in _taken(p)}
    assert (predate, takes) == (_names(TABLE[patch_id][2]), _names(TABLE[patch_id][3]))



def test_no_patch_asked_after_a_local_step_is_asked_by_an_incident_that_took_them_first() -> None:
    # Asked right after a local step, a patch reads differently on a replay whose task boundary
    # differs (workflows/recovery_steps.py, PATCHES_ASKED_FIRST): each such call must be skipped
    # under "patches-asked-first", and the list must name only patches the workflows ask.
    sources = {path: path.read_text() for path in (ROOT / "workflows").rglob("*.py")}
    assert set(PATCHES_ASKED_FIRST) <= _ids_in_code()
    for patch_id in PATCHES_ASKED_FIRST:
        calls = [(path.name, source[max(0, m.start() - 20):m.start()])
                 for path, source in sources.items()
                 for m in re.finditer(rf'(?<!`)workflow\.patched\("{re.escape(patch_id)}"\)', source)]  # not in docs
        assert calls, patch_id
        unguarded = [(name, before) for name, before in calls if not before.endswith("patches_first or ")]
        assert not unguarded, (patch_id, unguarded)
