"""Job-controlled text shown in an operator's terminal as text, never as markup or control codes.

An incident carries what a job printed (evidence lines), what its owner chose (job name,
comment, paths) and what a log claimed (node names). Printed through rich as a plain string, a
`[/x]` in a log line is a markup error that stops `goodput incident` from showing the incident at
all, and `[link=...]` or `[conceal]` is markup the job chose. Printed raw, escape sequences reach
the terminal: OSC 52 writes the operator's clipboard, OSC 8 makes links, CSI 8m hides text, a
carriage return overwrites what was shown, bidirectional overrides reorder it.

`terminal_text` is the one way such text enters a renderable: a `rich.text.Text` (never parsed
as markup) whose control and format characters are spelled out (`\\x1b`, `\\u202e`), so the
operator sees that they were there and the terminal never acts on them.
"""

from __future__ import annotations

import unicodedata

from rich.text import Text

# Cc: C0, DEL and C1 controls (ESC, CR, BEL, CSI as U+009B). Cf: format characters (bidi
# overrides, zero-width joiners). Cs/Co/Cn: lone surrogates, private use and unassigned code
# points, which a terminal may draw as anything.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})
_LINE_ENDINGS = frozenset({"\u2028", "\u2029"})


def visible(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control or format character written as its escape; `keep_newlines`
    keeps `\\n` (a multi-line field the caller lays out), never `\\r`."""
    if text.isprintable() and not (_LINE_ENDINGS & set(text)):
        return text
    out: list[str] = []
    for ch in text:
        if ch == "\n" and keep_newlines:
            out.append(ch)
        elif ch in _LINE_ENDINGS or unicodedata.category(ch) in _INVISIBLE or (ch.isspace() and ch != " "):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def terminal_text(text: str, *, style: str = "", keep_newlines: bool = False) -> Text:
    """A renderable that shows `text` as it is (no markup), control characters made visible."""
    return Text(visible(text, keep_newlines=keep_newlines), style=style)


def error_line(message: str, limit: int = 2000) -> str:
    """An error message as one line: its lines joined with "; ", control characters spelled out,
    bounded, so `goodput ... 2>&1 | tail -1` or a log collector always gets the whole error."""
    parts = [part.strip() for part in message[:limit].splitlines() if part.strip()]
    return visible("; ".join(parts) or "unknown error") + ("…" if len(message) > limit else "")
