"""What is generated from the command line's parser: docs/cli.md and the shell completion scripts.

Both are written from the argparse parser itself (workers.cli_parser), never by hand, so a new
command or flag appears in the reference and in completion the moment it is in the parser, and a
test that regenerates docs/cli.md catches a committed copy that drifted. Pure: a parser in, text out.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator


def commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The flags a user may type: not positionals, not hidden aliases, not -h."""
    for action in parser._actions:
        if action.option_strings and action.help is not argparse.SUPPRESS:
            yield action


def _long(action: argparse.Action) -> str:
    return next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])


def reference(parser: argparse.ArgumentParser) -> str:
    """docs/cli.md: the top-level help, then every command's."""
    parts = ["# The `goodput` command line\n",
             "Generated from the parser (`python -m workers.cli_docs > docs/cli.md`); do not edit by hand.\n",
             "```text", parser.format_help().rstrip(), "```\n"]
    for name, sub in commands(parser):
        parts += [f"## goodput {name}\n", "```text", sub.format_help().rstrip(), "```\n"]
    return "\n".join(parts)


def _words(parser: argparse.ArgumentParser) -> str:
    return " ".join(_long(a) for a in options(parser))


def bash(parser: argparse.ArgumentParser) -> str:
    prog = parser.prog
    names = " ".join(name for name, _ in commands(parser))
    cases = "\n".join(f"        {name}) opts=\"{_words(sub)}\" ;;" for name, sub in commands(parser))
    choices = "\n".join(f"        {name}) opts=\"$opts {' '.join(a.choices)}\" ;;"
                        for name, sub in commands(parser) for a in sub._actions
                        if not a.option_strings and a.choices and a.nargs in (None, "?"))
    return f"""# bash completion for {prog}: eval "$({prog} completion bash)"
_{prog}_complete() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" cmd="" opts="" w
    for w in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        case "$w" in -*) ;; *) cmd="$w"; break ;; esac
    done
    case "$cmd" in
        "") opts="{names} {_words(parser)}" ;;
{cases}
    esac
    case "$cmd" in
{choices}
    esac
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}}
complete -o default -F _{prog}_complete {prog}
"""


def zsh(parser: argparse.ArgumentParser) -> str:
    return (f"# zsh completion for {parser.prog}: eval \"$({parser.prog} completion zsh)\"\n"
            "autoload -U +X bashcompinit && bashcompinit\n" + bash(parser))


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish(parser: argparse.ArgumentParser) -> str:
    prog = parser.prog
    lines = [f"# fish completion for {prog}: {prog} completion fish > ~/.config/fish/completions/{prog}.fish",
             f"complete -c {prog} -f"]
    for action in options(parser):
        lines.append(f"complete -c {prog} -n __fish_use_subcommand -l {_long(action)[2:]} "
                     f"-d {_fish_quote(action.help or '')}")
    for name, sub in commands(parser):
        summary = (sub.description or "").split("\n")[0].rstrip(".")
        lines.append(f"complete -c {prog} -n __fish_use_subcommand -a {name} -d {_fish_quote(summary)}")
        for action in options(sub):
            lines.append(f"complete -c {prog} -n '__fish_seen_subcommand_from {name}' -l {_long(action)[2:]} "
                         f"-d {_fish_quote(action.help or '')}")
        for action in sub._actions:
            if not action.option_strings and action.choices and action.nargs in (None, "?"):
                lines.append(f"complete -c {prog} -n '__fish_seen_subcommand_from {name}' "
                             f"-a {_fish_quote(' '.join(action.choices))}")
    return "\n".join(lines) + "\n"


SCRIPTS = {"bash": bash, "zsh": zsh, "fish": fish}
