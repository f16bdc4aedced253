"""An in-memory filesystem for checkpoint discovery tests, which polices what discovery reads.

Files are sizes and mtimes, with text only where a test gives it (metadata, markers), and binary
files a head and a tail (the middle reads as zeros, like a sparse file), so a 512 MB shard costs a
few hundred bytes. Every read is recorded. Reading a shard (by suffix) or a file without text as
text, asking for more than the metadata limit, or reading a shard's *middle* (anything but its
first or last bytes: headers and end records) raises `ForbiddenReadError`: that is the property
that discovery stays cheap on multi-terabyte checkpoints. Reading over the caller's limit raises
`TooLargeError` like the real filesystem, without counting as a read. Like the real one it is
confined by `within(root)` (lexically: the fake has no symlinks) and has special files
(`add_special`: a FIFO, a socket) that are listed as refused entries and never read.
"""

from __future__ import annotations

import copy
import posixpath
from dataclasses import dataclass

from goodput.checkpoints.formats import ZIP_TAIL
from goodput.checkpoints.fs import (
    METADATA_LIMIT,
    RANGE_LIMIT,
    SMALL_TEXT_LIMIT,
    Entry,
    FileSystem,
    NotRegularFileError,
    OutsideRootError,
    TooLargeError,
    is_shard_name,
    within_root,
)
from tests.fakes.checkpoint_bytes import dcp_metadata, safetensors_head, torch_zip

DEFAULT_MTIME = 1_700_000_000.0
# A shard's head and tail that checks may read: its header, or its zip end records.
SHARD_EDGE = 64 * 1024


class ForbiddenReadError(AssertionError):
    """Discovery tried to open a shard, an opaque file, or to read more than metadata size."""


@dataclass
class _Node:
    is_dir: bool
    size: int = 0
    mtime: float = DEFAULT_MTIME
    text: str | None = None
    special: str = ""  # "a FIFO", "a socket": neither file nor directory
    head: bytes = b""
    tail: bytes = b""

    def content(self, offset: int, length: int) -> bytes:
        if self.text is not None:
            return self.text.encode()[offset:offset + length]
        end = min(self.size, offset + length)
        if end <= offset:
            return b""
        data = bytearray(end - offset)  # the middle of a sparse file reads as zeros
        head_end = min(len(self.head), end)
        if offset < head_end:
            data[:head_end - offset] = self.head[offset:head_end]
        tail_start = self.size - len(self.tail)
        tail_from = max(tail_start, offset)
        if tail_from < end:
            data[tail_from - offset:] = self.tail[tail_from - tail_start:end - tail_start]
        return bytes(data)


def _norm(path: str) -> str:
    return posixpath.normpath("/" + path.lstrip("/"))


class FakeFileSystem:
    def __init__(self, mtime: float = DEFAULT_MTIME) -> None:
        self.default_mtime = mtime
        self._nodes: dict[str, _Node] = {"/": _Node(is_dir=True, mtime=mtime)}
        self.reads: list[str] = []
        self.ranges: list[tuple[str, int, int]] = []
        self.listed: list[str] = []
        self.stats: list[str] = []
        self.root = "/"

    def within(self, root: str) -> FileSystem:
        """A view confined to `root` that shares this tree and its records of reads."""
        root = _norm(root)
        if not within_root(root, self.root):
            raise OutsideRootError(f"{root} is outside {self.root}")
        view = copy.copy(self)
        view.root = root
        return view

    def _inside(self, path: str) -> str:
        path = _norm(path)
        if not within_root(path, self.root):
            raise OutsideRootError(f"{path} is outside the checkpoint root {self.root}")
        return path

    # building -----------------------------------------------------------------------------

    def add_dir(self, path: str, mtime: float | None = None) -> str:
        path = _norm(path)
        parent = posixpath.dirname(path)
        if parent != path and parent not in self._nodes:
            self.add_dir(parent, mtime)
        node = self._nodes.get(path)
        if node is not None and not node.is_dir:
            raise ValueError(f"{path} is a file")
        if node is None:
            self._nodes[path] = _Node(is_dir=True, mtime=self.default_mtime if mtime is None else mtime)
        return path

    def add_file(self, path: str, size: int | None = None, text: str | None = None,
                 mtime: float | None = None, head: bytes = b"", tail: bytes = b"") -> str:
        """A file of `size` bytes (default: the length of `text`, else of `head` + `tail`, else 1 KiB
        of opaque content) beginning with `head` and ending with `tail` (zeros in between)."""
        path = _norm(path)
        self.add_dir(posixpath.dirname(path))
        if size is None:
            size = len(text.encode()) if text is not None else (len(head) + len(tail)) or 1024
        self._nodes[path] = _Node(is_dir=False, size=size, text=text, head=head, tail=tail,
                                  mtime=self.default_mtime if mtime is None else mtime)
        return path

    def truncate(self, path: str, size: int) -> None:
        """Cuts a file to `size` bytes, as a killed writer or a full filesystem leaves it."""
        node = self._nodes[_norm(path)]
        tail_start = node.size - len(node.tail)
        node.head, node.tail, node.size = node.head[:size], node.tail[:max(0, size - tail_start)], size

    def add_special(self, path: str, kind: str = "a FIFO", mtime: float | None = None) -> str:
        """A FIFO (or socket, device) at `path`: listed, never a file to read."""
        path = _norm(path)
        self.add_dir(posixpath.dirname(path))
        self._nodes[path] = _Node(is_dir=False, special=kind, mtime=self.default_mtime if mtime is None else mtime)
        return path

    def remove(self, path: str) -> None:
        path = _norm(path)
        for key in [k for k in self._nodes if k == path or k.startswith(path.rstrip("/") + "/")]:
            del self._nodes[key]

    def paths(self) -> list[str]:
        return sorted(self._nodes)

    # the FileSystem protocol ----------------------------------------------------------------

    def _entry(self, path: str, node: _Node) -> Entry:
        refused = f"{node.special}, not a regular file" if node.special else ""
        return Entry(name=posixpath.basename(path), is_dir=node.is_dir, size=node.size, mtime=node.mtime,
                     refused=refused)

    def list_dir(self, path: str) -> list[Entry]:
        path = self._inside(path)
        self.listed.append(path)
        node = self._nodes.get(path)
        if node is None or not node.is_dir:
            return []
        prefix = path.rstrip("/") + "/"
        return sorted((self._entry(k, n) for k, n in self._nodes.items()
                       if k.startswith(prefix) and k != path and "/" not in k[len(prefix):]),
                      key=lambda e: e.name)

    def stat(self, path: str) -> Entry | None:
        path = self._inside(path)
        self.stats.append(path)
        node = self._nodes.get(path)
        return None if node is None else self._entry(path, node)

    def _regular(self, path: str) -> _Node:
        """The regular file at `path`, refused like the real filesystem refuses what is not one."""
        node = self._nodes.get(path)
        if node is None:
            raise FileNotFoundError(path)
        if node.is_dir or node.special:
            raise NotRegularFileError(f"{node.special or 'a directory'}, not a regular file")
        return node

    def read_small_text(self, path: str, limit: int = SMALL_TEXT_LIMIT) -> str:
        path = self._inside(path)
        if limit > METADATA_LIMIT:
            raise ForbiddenReadError(f"asked to read up to {limit} bytes of {path}: more than metadata")
        if is_shard_name(path):
            raise ForbiddenReadError(f"tried to read shard {path}")
        node = self._regular(path)
        if node.size > limit:
            raise TooLargeError(f"{path} is {node.size} bytes, over the {limit}-byte limit")
        if node.text is None and node.size:
            raise ForbiddenReadError(f"tried to read {path}, which has opaque (binary) content")
        self.reads.append(path)
        return node.text or ""

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        path = self._inside(path)
        if length > RANGE_LIMIT:
            raise TooLargeError(f"asked for {length} bytes of {path}, over the range limit")
        node = self._regular(path)
        end = min(node.size, offset + length)
        edge = max(SHARD_EDGE, len(node.head))
        if is_shard_name(path) and end > edge and offset < node.size - max(ZIP_TAIL, len(node.tail)):
            raise ForbiddenReadError(f"read bytes {offset}..{end} of shard {path}: its middle, not a header or tail")
        self.ranges.append((path, offset, length))
        return node.content(offset, length)


# Builders: well-formed checkpoints of each layout, which tests then damage. -------------------

MB = 1024 * 1024


def add_torch_file(fs: FakeFileSystem, path: str, size: int, mtime: float | None = None,
                   fields: dict[str, object] | None = None) -> str:
    """A torch.save zip of `size` bytes whose data.pkl holds `fields`."""
    head, tail = torch_zip(size, fields)
    return fs.add_file(path, size=size, mtime=mtime, head=head, tail=tail)


def add_safetensors(fs: FakeFileSystem, path: str, size: int, mtime: float | None = None) -> str:
    return fs.add_file(path, size=size, mtime=mtime, head=safetensors_head(size))


def write_dcp(fs: FakeFileSystem, path: str, ranks: int = 4, mtime: float | None = None, threads: int = 1) -> str:
    shards = {f"__{rank}_{thread}.distcp": 64 * MB for rank in range(ranks) for thread in range(threads)}
    fs.add_file(f"{path}/.metadata", head=dcp_metadata(shards), mtime=mtime)
    for name, size in shards.items():
        fs.add_file(f"{path}/{name}", size=size, mtime=mtime)
    return _norm(path)


def write_megatron(fs: FakeFileSystem, root: str, step: int, tp: int = 2, pp: int = 1, tracker: bool = True,
                   mtime: float | None = None, name: str | None = None) -> str:
    """A legacy-format Megatron iteration (`mp_rank_TT[_PPP]/model_optim_rng.pt`); `tracker`
    points latest_checkpointed_iteration.txt at it."""
    path = f"{root}/{name or f'iter_{step:07d}'}"
    fs.add_dir(path, mtime=mtime)
    for t in range(tp):
        for p in range(pp):
            rank = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "")
            add_torch_file(fs, f"{path}/{rank}/model_optim_rng.pt", 128 * MB, mtime)
    if tracker:
        fs.add_file(f"{root}/latest_checkpointed_iteration.txt", text="release" if name == "release" else str(step))
    return _norm(path)


def write_megatron_dist(fs: FakeFileSystem, root: str, step: int, ranks: int = 4, tracker: bool = True,
                        mtime: float | None = None) -> str:
    """A Megatron torch_dist iteration: DCP shards plus common.pt and metadata.json."""
    path = write_dcp(fs, f"{root}/iter_{step:07d}", ranks, mtime)
    add_torch_file(fs, f"{path}/common.pt", MB, mtime)
    fs.add_file(f"{path}/metadata.json", text='{"sharded_backend": "torch_dist", "sharded_backend_version": 1}',
                mtime=mtime)
    if tracker:
        fs.add_file(f"{root}/latest_checkpointed_iteration.txt", text=f"{step}\n")
    return path


def write_deepspeed(fs: FakeFileSystem, root: str, step: int, mp: int = 1, dp: int = 2, latest: bool = True,
                    mtime: float | None = None) -> str:
    path = f"{root}/global_step{step}"
    for m in range(mp):
        add_torch_file(fs, f"{path}/mp_rank_{m:02d}_model_states.pt", 32 * MB, mtime,
                       fields={"dp_world_size": dp, "mp_world_size": mp, "global_steps": step})
        for d in range(dp):
            add_torch_file(fs, f"{path}/bf16_zero_pp_rank_{d}_mp_rank_{m:02d}_optim_states.pt", 96 * MB, mtime)
    if latest:
        fs.add_file(f"{root}/latest", text=f"global_step{step}")
    return _norm(path)


def write_hf(fs: FakeFileSystem, root: str, step: int, shards: int = 0, mtime: float | None = None,
             name: str | None = None) -> str:
    """An HF Trainer checkpoint; `shards` > 0 writes a sharded safetensors set with its index."""
    path = f"{root}/{name or f'checkpoint-{step}'}"
    if shards:
        files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
        weight_map = ", ".join(f'"layer.{i}.weight": "{f}"' for i, f in enumerate(files))
        fs.add_file(f"{path}/model.safetensors.index.json",
                    text=f'{{"metadata": {{"total_size": 1}}, "weight_map": {{{weight_map}}}}}', mtime=mtime)
        for f in files:
            add_safetensors(fs, f"{path}/{f}", 512 * MB, mtime)
    else:
        add_safetensors(fs, f"{path}/model.safetensors", 512 * MB, mtime)
    add_torch_file(fs, f"{path}/optimizer.pt", MB, mtime)
    fs.add_file(f"{path}/trainer_state.json", text=f'{{"global_step": {step}, "log_history": []}}', mtime=mtime)
    return _norm(path)


def write_generic(fs: FakeFileSystem, root: str, name: str, marker: str | None = ".complete",
                  mtime: float | None = None) -> str:
    path = f"{root}/{name}"
    fs.add_file(f"{path}/model.bin", size=MB, mtime=mtime)
    fs.add_file(f"{path}/opt/state.bin", size=MB, mtime=mtime)
    if marker:
        fs.add_file(f"{path}/{marker}", text="", mtime=mtime)
    return _norm(path)


def write_lightning(fs: FakeFileSystem, root: str, steps: tuple[int, ...] = (200, 400), last: int | None = 1000,
                    mtime: float | None = None) -> None:
    """Lightning's ModelCheckpoint: top-k `epoch=E-step=N.ckpt` files, and `last.ckpt` recording
    the newest step in its data.pkl (`save_last=True`)."""
    for step in steps:
        add_torch_file(fs, f"{root}/epoch={step // 100}-step={step}.ckpt", 8 * MB, mtime,
                       fields={"epoch": step // 100, "global_step": step})
    if last is not None:
        add_torch_file(fs, f"{root}/last.ckpt", 8 * MB, mtime, fields={"epoch": last // 100, "global_step": last})
