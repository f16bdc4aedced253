"""The shape of one catalogue entry and of one hit, kept apart from the data and the matcher.

Signatures are data (TOML files under `data/`); this module only says what a valid entry is, so a
typo in a category, a regex that does not compile or a missing prefilter literal fails when the
catalogue loads, not when the first real incident arrives. Patterns are compiled with RE2 (linear
time whatever a log line holds): one that needs backtracking (a backreference, a lookaround) is
refused at load time like any other bad pattern.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from pydantic import Field, field_validator, model_validator

from goodput.models import Category, CulpritKind, Frozen, RestartEffect
from goodput.untrusted_text import LinearPatternError, LinearRegex, bounded_int

# No job has a billion ranks; a longer number in a log line is noise (or an attack), never a rank.
MAX_RANK_DIGITS = 9

# Named groups a pattern may use; anything else is a catalogue bug, caught at load time.
KNOWN_GROUPS = frozenset({"host", "address", "pci", "rank", "task", "xid", "peer", "path", "code", "action",
                          "ranks", "exitcode", "detail", "pg", "op", "numel"})


class Role(StrEnum):
    """How much a hit says about *why* a job died."""

    ROOT = "root"          # a cause: hardware fault, exception, OOM, node failure, policy
    KNOCK_ON = "knock-on"  # a consequence of a cause elsewhere (aborts, SIGTERM cascades, banners)
    INFO = "info"          # worth reporting, never decides alone (corrected ECC, Xid 45/154-none)
    LOCATOR = "locator"    # says nothing about the cause, only where things ran (host <-> rank)


ROLE_ORDER: dict[Role, int] = {Role.ROOT: 3, Role.KNOCK_ON: 2, Role.INFO: 1, Role.LOCATOR: 0}


class Signature(Frozen):
    """One recognisable log line and what it implies."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$", max_length=64)
    family: str = Field(min_length=1)
    category: Category
    culprit_kind: CulpritKind
    role: Role = Role.ROOT
    # Higher wins among hits of the same role; hardware explains software symptoms.
    precedence: int = Field(ge=0, le=1000)
    pattern: str
    # At least one must occur verbatim (case-sensitively, even for ignore_case rules) in a line
    # before the regex is tried: the prefilter.
    literals: tuple[str, ...] = Field(min_length=1)
    ignore_case: bool = False
    restart: bool
    drain: bool
    # Restart away from the culprit's node without draining it: the framework itself asked for the
    # job to run again on other hardware (Megatron's rerun on a different GPU); the node stays in
    # service for every other job. Only with restart and without drain.
    exclude: bool = False
    # A generic rule (a bare `FooError:` line) yields to any specific rule that matched the same line.
    generic: bool = False
    # A fallback of level N yields to any hit of a lower level on the same line (a generic rule is
    # level 1): the bare number of an Xid whose meaning a context rule reads (2), an Xid code no
    # catalogue row knows (3).
    fallback: int = Field(default=0, ge=0, le=3)
    # Ids of rules this one displaces when both match the same line: it reads the line's context (a
    # heartbeat monitor polling a store already torn down) where they read only its wording.
    supersedes: tuple[str, ...] = ()
    # Slurm ended the job here: application errors printed after this line are teardown noise.
    terminates: bool = False
    # Ids of signatures whose hits anywhere in the same log this one explains away (Fabric Manager's
    # "nothing to do" makes its service failure expected): those hits become information.
    voids: tuple[str, ...] = ()
    restart_effect: RestartEffect = RestartEffect.NONE
    # The line is printed on the faulty machine itself (a kernel, driver or CUDA error), so a drain
    # may target the node that produced the log even when the line names no host. False for lines
    # printed elsewhere about another node (Slurm's banners on the batch host).
    source_local: bool = True
    # The document and section the rule rests on (vendor rules generated from a vendor's catalogue).
    source: str = ""
    # False where the source says what happened but not what the verdict needs (a job ended at its
    # time limit may have hung long before; a node with fewer GPUs than configured may be broken or
    # misconfigured): such a rule never decides a `high` verdict, whatever its source.
    settles: bool = True
    explanation: str = Field(min_length=1)

    @field_validator("literals")
    @classmethod
    def _no_empty_literal(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not lit for lit in value):
            raise ValueError("an empty literal would make the prefilter pass every line")
        if any("\n" in lit for lit in value):
            raise ValueError("a literal cannot span lines: the matcher looks for literals line by line")
        return value

    @model_validator(mode="after")
    def _exclude_restarts_elsewhere(self) -> Signature:
        if self.exclude and (self.drain or not self.restart):
            raise ValueError(f"{self.id}: exclude means restart elsewhere, without a drain")
        return self

    @model_validator(mode="after")
    def _pattern_compiles(self) -> Signature:
        try:
            compiled = self.regex
        except LinearPatternError as exc:
            raise ValueError(f"{self.id}: pattern does not compile: {exc}") from exc
        unknown = compiled.group_names - KNOWN_GROUPS
        if unknown:
            raise ValueError(f"{self.id}: unknown named groups {sorted(unknown)}")
        return self

    @cached_property
    def regex(self) -> LinearRegex:
        """RE2, compiled once; `LinearPatternError` for a pattern it cannot run in linear time."""
        return LinearRegex(self.pattern, ignore_case=self.ignore_case)

    @property
    def tier(self) -> int:
        """Hits of the lowest tier on a line displace the others (0: specific)."""
        return self.fallback or int(self.generic)

    @property
    def rank_key(self) -> tuple[int, int]:
        return (ROLE_ORDER[self.role], self.precedence)


@dataclass(frozen=True, slots=True)
class LineContext:
    """Who printed a line, read from launcher prefixes (`srun -l`, `[rankN]:`, NCCL, syslog)."""

    host: str | None = None
    rank: int | None = None
    task: int | None = None


@dataclass(frozen=True, slots=True)
class Match:
    """One signature hit on one line (a dataclass, not pydantic: it is built on the hot path)."""

    signature: Signature
    line_no: int
    text: str
    groups: dict[str, str] = field(default_factory=dict)
    context: LineContext = LineContext()

    @property
    def host(self) -> str | None:
        return self.groups.get("host") or self.context.host

    @property
    def rank(self) -> int | None:
        for key in ("rank", "task"):
            value = bounded_int(self.groups.get(key), max_digits=MAX_RANK_DIGITS)
            if value is not None:
                return value
        if self.context.rank is not None:
            return self.context.rank
        return self.context.task
