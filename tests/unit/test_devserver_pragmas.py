"""The embedded dev server's SQLite settings (#29): WAL, and in WAL mode a commit not fsynced.

`synchronous=normal` with `journal_mode=wal` keeps every committed transaction through a crash of
the server process (the WAL is in the OS's page cache) and can lose the last ones only to a power
loss or kernel crash; it took the storm's persistence writes off the disk's fsync path (docs/scaling.md,
"A 100-job burst"). Production runs an external Temporal (docs/deployment.md), not this server.
"""

from __future__ import annotations

from pathlib import Path

from workers.devserver import dev_server_args


def _pragmas(args: list[str]) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == "--sqlite-pragma"]


def test_the_embedded_server_keeps_its_database_in_wal_mode_without_an_fsync_per_commit(tmp_path: Path) -> None:
    args = dev_server_args(port=7233, ui_port=None, db_file=tmp_path / "temporal.db")
    assert _pragmas(args) == ["journal_mode=wal", "synchronous=normal"]


def test_without_wal_the_sqlite_default_stays(tmp_path: Path) -> None:
    assert _pragmas(dev_server_args(port=7233, ui_port=None, db_file=tmp_path / "t.db", wal=False)) == []
    assert _pragmas(dev_server_args(port=7233, ui_port=None, db_file=None)) == []
