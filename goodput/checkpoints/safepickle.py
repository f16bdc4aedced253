"""Read the data inside a pickle without running it: a symbolic interpreter of pickle opcodes.

A checkpoint's `.metadata` (DCP) and the `data.pkl` inside every `torch.save` file are pickles,
and the tree belongs to the job's user. Unpickling is code execution (`GLOBAL os system` then
`REDUCE`), and goodput runs as a Slurm operator, so `pickle.load` is never called on them, not even
with a restricted `find_class`. Yet the facts goodput needs are in there: the byte ranges DCP
recorded for every shard file, DeepSpeed's data-parallel world size, Lightning's global step.

So this module walks the opcodes (`pickletools.genops`, a parser that executes nothing) with a
stack machine of its own whose globals are names, never imported objects, and whose calls are
records (`Call`), never made. The result is a tree of plain values (dict, list, tuple, str, int,
float, bytes, None, bool) and `Call` records that layouts can search. It costs time linear in the
pickle's size, the size is bounded by the caller, and any malformed or unsupported input raises
`PickleError` with a message; nothing else escapes.
"""

from __future__ import annotations

import io
import pickletools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MAX_OPCODES = 20_000_000
MAX_STACK_DEPTH = 100_000


class PickleError(ValueError):
    """The bytes are not a pickle this reader can follow; the message says why."""


@dataclass(frozen=True, slots=True)
class Global:
    """A name the pickle refers to (`module.name`): recorded, never imported."""

    module: str
    name: str

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(eq=False, slots=True)
class Call:
    """What unpickling would have built by calling `func(*args)` and then applying `state`.

    Hashable by identity, so a `Call` can key a dict the way the real object would (DCP keys
    `storage_data` by `MetadataIndex` objects). `items` and `entries` hold what APPENDS and
    SETITEMS added to it (a list or dict subclass).
    """

    func: Any
    args: tuple[Any, ...] = ()
    state: Any = None
    items: list[Any] = field(default_factory=list)
    entries: dict[Any, Any] = field(default_factory=dict)

    def class_name(self) -> str:
        """The called class's name (`_StorageInfo`), or "" when `func` is not a plain global."""
        return self.func.name if isinstance(self.func, Global) else ""

    def fields(self) -> dict[str, Any]:
        """The attributes BUILD gave it: a dataclass pickles its `__dict__` as the state (with
        `__slots__`, a `(None, slots)` pair)."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2:
            merged: dict[str, Any] = {}
            for part in state:
                if isinstance(part, dict):
                    merged.update(part)
            return merged
        return state if isinstance(state, dict) else {}


@dataclass(frozen=True, slots=True)
class PersistentRef:
    """A persistent id (torch.save refers to each tensor storage this way): kept as data."""

    pid: Any


class _Mark:
    __slots__ = ()


_MARK = _Mark()


MAX_KEY_DEPTH = 32
# Hashing a tuple hashes everything in it, and the memo lets a small pickle reuse one tuple many
# times over, so a key's cost is its expanded size: bounded per key and over the whole pickle.
MAX_KEY_ITEMS = 10_000
MAX_KEY_WORK = 20_000_000
_ATOMS = (str, int, float, bytes, bool, type(None), Global, Call)


class _Machine:
    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.next_memo = 0  # MEMOIZE's implicit index
        self.key_work = 0

    def key(self, value: Any) -> Any:
        """`value` when it can key a dict or sit in a set: an atom, or a shallow, small tuple or
        frozenset of atoms (hashing recurses in C, once per item, however often one is shared)."""
        pending: list[tuple[Any, int]] = [(value, 0)]
        items = 0
        while pending:
            item, depth = pending.pop()
            items += 1
            if items > MAX_KEY_ITEMS:
                raise PickleError(f"a dict key of more than {MAX_KEY_ITEMS} values")
            if isinstance(item, PersistentRef):
                item = item.pid
            if isinstance(item, _ATOMS):
                continue
            if not isinstance(item, tuple | frozenset):
                raise PickleError(f"an unhashable {type(item).__name__} used as a dict key or set item")
            if depth >= MAX_KEY_DEPTH:
                raise PickleError(f"a dict key nested more than {MAX_KEY_DEPTH} levels deep")
            pending.extend((inner, depth + 1) for inner in item)
        self.key_work += items
        if self.key_work > MAX_KEY_WORK:
            raise PickleError(f"dict keys of more than {MAX_KEY_WORK} values in all")
        return value

    def pop(self) -> Any:
        if not self.stack:
            raise PickleError("stack underflow")
        value = self.stack.pop()
        if value is _MARK:
            raise PickleError("a MARK where a value was expected")
        return value

    def top(self) -> Any:
        if not self.stack or self.stack[-1] is _MARK:
            raise PickleError("stack underflow")
        return self.stack[-1]

    def push(self, value: Any) -> None:
        if len(self.stack) >= MAX_STACK_DEPTH:
            raise PickleError(f"more than {MAX_STACK_DEPTH} values on the stack")
        self.stack.append(value)

    def pop_mark(self) -> list[Any]:
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index] is _MARK:
                items = self.stack[index + 1:]
                del self.stack[index:]
                return items
        raise PickleError("no MARK to pop to")

    def memoize(self, index: int) -> None:
        if index < 0 or index > MAX_OPCODES:
            raise PickleError(f"memo index {index} out of range")
        self.memo[index] = self.top()

    def fetch(self, index: int) -> None:
        if index not in self.memo:
            raise PickleError(f"memo index {index} was never stored")
        self.push(self.memo[index])

    def append_to(self, target: Any, values: list[Any]) -> None:
        if isinstance(target, list):
            target.extend(values)
        elif isinstance(target, Call):
            target.items.extend(values)
        else:
            raise PickleError(f"APPEND to a {type(target).__name__}")

    def set_items(self, target: Any, values: list[Any]) -> None:
        if len(values) % 2:
            raise PickleError("SETITEMS with an odd number of values")
        pairs = zip(values[::2], values[1::2], strict=True)
        if isinstance(target, dict):
            for key, value in pairs:
                target[self.key(key)] = value
        elif isinstance(target, Call):
            for key, value in pairs:
                target.entries[self.key(key)] = value
        else:
            raise PickleError(f"SETITEM on a {type(target).__name__}")


def _ops(data: bytes) -> Iterator[tuple[str, Any]]:
    ops = pickletools.genops(io.BytesIO(data))
    for count in range(MAX_OPCODES + 1):
        if count == MAX_OPCODES:
            raise PickleError(f"more than {MAX_OPCODES} opcodes")
        try:
            # Protocol 0's quoted strings are escape-decoded, which warns on a bad escape; the
            # warning is the input's fault, not a condition for the caller (or a test's filter).
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                opcode, arg, _pos = next(ops)
        except StopIteration:
            return
        except (ValueError, EOFError, OverflowError, MemoryError, UnicodeError, IndexError, KeyError) as error:
            raise PickleError(f"not a well-formed pickle: {str(error)[:120]}") from None
        yield opcode.name, arg


_SIMPLE = frozenset({"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
                     "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
                     "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"})
_IGNORED = frozenset({"PROTO", "FRAME"})
_REFUSED = {"EXT1": "an extension-registry reference", "EXT2": "an extension-registry reference",
            "EXT4": "an extension-registry reference", "NEXT_BUFFER": "an out-of-band buffer",
            "READONLY_BUFFER": "an out-of-band buffer"}


def read_pickle(data: bytes) -> Any:
    """The value the pickle describes, with every global a `Global` and every call a `Call`."""
    vm = _Machine()
    for name, arg in _ops(data):
        if name == "STOP":
            return vm.pop()
        if name in _IGNORED:
            continue
        if name in _REFUSED:
            raise PickleError(f"{name}: {_REFUSED[name]}, which this reader does not follow")
        # Each group answers whether it knew the opcode; one it did not is refused, never skipped.
        if not (_stack_op(vm, name, arg) or _container_op(vm, name) or _object_op(vm, name, arg)):
            raise PickleError(f"opcode {name} is not supported")
    raise PickleError("the pickle ends without STOP")


def _stack_op(vm: _Machine, name: str, arg: Any) -> bool:
    """Values, marks and the memo."""
    if name in _SIMPLE:
        vm.push(bytes(arg) if isinstance(arg, bytearray) else arg)
    elif name == "NONE":
        vm.push(None)
    elif name in ("NEWTRUE", "NEWFALSE"):
        vm.push(name == "NEWTRUE")
    elif name == "MARK":
        vm.push(_MARK)
    elif name == "POP":
        vm.pop()
    elif name == "POP_MARK":
        vm.pop_mark()
    elif name == "DUP":
        vm.push(vm.top())
    elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
        vm.memoize(int(arg))
    elif name == "MEMOIZE":
        vm.memoize(vm.next_memo)
        vm.next_memo += 1
    elif name in ("GET", "BINGET", "LONG_BINGET"):
        vm.fetch(int(arg))
    else:
        return False
    return True


def _container_op(vm: _Machine, name: str) -> bool:
    """Tuples, lists, dicts and sets: built, or added to."""
    if name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "EMPTY_SET"):
        vm.push({"EMPTY_DICT": dict, "EMPTY_LIST": list, "EMPTY_TUPLE": tuple, "EMPTY_SET": set}[name]())
    elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
        count = int(name[-1])
        values = [vm.pop() for _ in range(count)]
        vm.push(tuple(reversed(values)))
    elif name == "TUPLE":
        vm.push(tuple(vm.pop_mark()))
    elif name == "LIST":
        vm.push(vm.pop_mark())
    elif name == "DICT":
        built: dict[Any, Any] = {}
        vm.set_items(built, vm.pop_mark())
        vm.push(built)
    elif name == "FROZENSET":
        vm.push(frozenset(vm.key(v) for v in vm.pop_mark()))
    elif name == "ADDITEMS":
        values = vm.pop_mark()
        target = vm.top()
        if not isinstance(target, set):
            raise PickleError(f"ADDITEMS to a {type(target).__name__}")
        target.update(vm.key(v) for v in values)
    elif name == "APPEND":
        value = vm.pop()
        vm.append_to(vm.top(), [value])
    elif name == "APPENDS":
        values = vm.pop_mark()
        vm.append_to(vm.top(), values)
    elif name == "SETITEM":
        value, key = vm.pop(), vm.pop()
        vm.set_items(vm.top(), [key, value])
    elif name == "SETITEMS":
        values = vm.pop_mark()
        vm.set_items(vm.top(), values)
    else:
        return False
    return True


def _object_op(vm: _Machine, name: str, arg: Any) -> bool:
    """Globals, calls, object state and persistent ids: recorded as `Global`, `Call` and
    `PersistentRef`, never looked up or run."""
    if name == "GLOBAL":
        module, _, attr = str(arg).partition(" ")
        vm.push(Global(module, attr))
    elif name == "STACK_GLOBAL":
        attr, module = vm.pop(), vm.pop()
        if not isinstance(attr, str) or not isinstance(module, str):
            raise PickleError("STACK_GLOBAL of something other than two strings")
        vm.push(Global(module, attr))
    elif name in ("REDUCE", "NEWOBJ"):
        args, func = vm.pop(), vm.pop()
        vm.push(Call(func, args if isinstance(args, tuple) else (args,)))
    elif name == "NEWOBJ_EX":
        kwargs, args, cls = vm.pop(), vm.pop(), vm.pop()
        vm.push(Call(cls, args if isinstance(args, tuple) else (args,), state=kwargs))
    elif name in ("INST", "OBJ"):
        _instance(vm, name, arg)
    elif name == "BUILD":
        state = vm.pop()
        target = vm.top()
        if not isinstance(target, Call):
            raise PickleError(f"BUILD on a {type(target).__name__}")
        target.state = state
    elif name in ("PERSID", "BINPERSID"):
        vm.push(PersistentRef(arg if name == "PERSID" else vm.pop()))
    else:
        return False
    return True


def _instance(vm: _Machine, name: str, arg: Any) -> None:
    """Protocol 0's INST (the class named in the opcode) and OBJ (the class first after the mark)."""
    values = vm.pop_mark()
    if name == "INST":
        module, _, attr = str(arg).partition(" ")
        vm.push(Call(Global(module, attr), tuple(values)))
    elif not values:
        raise PickleError("OBJ without a class")
    else:
        vm.push(Call(values[0], tuple(values[1:])))


def walk(root: Any, limit: int = 5_000_000) -> Iterator[Any]:
    """Every value reachable from `root` once (iteratively: no recursion on deep input), at most
    `limit` of them."""
    seen: set[int] = set()
    pending = [root]
    visited = 0
    while pending:
        value = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        visited += 1
        if visited > limit:
            raise PickleError(f"more than {limit} values in the pickle")
        yield value
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list | tuple | set | frozenset):
            pending.extend(value)
        elif isinstance(value, Call):
            pending.extend((value.func, value.args, value.state, value.items, value.entries))
