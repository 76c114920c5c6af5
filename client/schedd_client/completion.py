"""``schedctl completion bash|zsh|fish``: shell completion scripts, made from schedctl's own parser.

The scripts hold the command tree (groups, commands, each command's options and the choices of
options that have them) as the parser defines it when the script is printed, so a command added
to schedctl is completed once the script is made again; nothing is asked of a cluster, and the
script runs no schedctl at completion time. Load one with, for example::

    source <(schedctl completion bash)                # ~/.bashrc
    source <(schedctl completion zsh)                 # ~/.zshrc (through bashcompinit)
    schedctl completion fish > ~/.config/fish/completions/schedctl.fish
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field

from ._cli import PROG

__all__ = ["SHELLS", "Tree", "tree_of", "script"]

SHELLS = ("bash", "zsh", "fish")


@dataclass(slots=True)
class Tree:
    """What completes where: the groups and their commands, each command's options, the options
    that take a value (with their choices, if any)."""

    top: list[str] = field(default_factory=list)                     # groups and global options
    commands: dict[str, list[str]] = field(default_factory=dict)     # group -> commands
    options: dict[str, list[str]] = field(default_factory=dict)      # "group command" -> options
    valued: dict[str, list[str]] = field(default_factory=dict)       # option -> choices ([]: free)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser, tree: Tree) -> list[str]:
    out = []
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        out += [o for o in action.option_strings if o.startswith("--") or len(action.option_strings) == 1]
        if action.nargs != 0:
            for o in action.option_strings:
                tree.valued[o] = [str(c) for c in action.choices] if action.choices else []
    return sorted(set(out))


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    """The choices of a command's first positional argument, if it has them."""
    for action in parser._actions:
        if not action.option_strings and action.choices and not isinstance(action, argparse._SubParsersAction):
            return [str(c) for c in action.choices]
    return []


def tree_of(parser: argparse.ArgumentParser) -> Tree:
    tree = Tree()
    groups = _subparsers(parser)
    tree.top = [*groups, *_options(parser, tree)]
    for group, sub in groups.items():
        commands = _subparsers(sub)
        tree.commands[group] = list(commands) or _choices(sub)     # `completion bash`: its argument
        for command, leaf in commands.items():
            tree.options[f"{group} {command}"] = _options(leaf, tree)
    return tree


def script(shell: str, tree: Tree) -> str:
    if shell == "fish":
        return _fish(tree)
    text = _bash(tree)
    if shell == "zsh":
        return "# zsh: through bash completion (bashcompinit)\nautoload -U +X bashcompinit && bashcompinit\n" + text
    return text


def _words(items: list[str]) -> str:
    return shlex.quote(" ".join(items))


def _bash(tree: Tree) -> str:
    fn = f"_{PROG}_complete"
    lines = [f"# {PROG} completion for bash (made by `{PROG} completion bash`)",
             f"{fn}() {{",
             '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" group="" command="" i w',
             "  case \"$prev\" in"]
    for option, choices in sorted(tree.valued.items()):
        reply = f'COMPREPLY=( $(compgen -W {_words(choices)} -- "$cur") )' if choices else "COMPREPLY=()"
        lines.append(f"    {option}) {reply}; return;;")
    lines += ["  esac",
              "  for ((i=1; i<COMP_CWORD; i++)); do",
              '    w="${COMP_WORDS[i]}"',
              '    case "$w" in',
              f"      {'|'.join(sorted(tree.valued)) or '--'}) ((i++));;",
              "      -*) ;;",
              '      *) if [[ -z "$group" ]]; then group="$w"; elif [[ -z "$command" ]]; then command="$w"; fi;;',
              "    esac",
              "  done",
              "  local words",
              '  if [[ -z "$group" ]]; then',
              f"    words={_words(tree.top)}",
              '  elif [[ -z "$command" ]]; then',
              '    case "$group" in']
    lines += [f"      {group}) words={_words(commands)};;" for group, commands in tree.commands.items()]
    lines += ['      *) words="";;', "    esac", "  else", '    case "$group $command" in']
    lines += [f"      {shlex.quote(key)}) words={_words(options)};;" for key, options in tree.options.items()]
    lines += ['      *) words="";;', "    esac", "  fi",
              '  COMPREPLY=( $(compgen -W "$words" -- "$cur") )',
              "}",
              f"complete -o default -F {fn} {PROG}", ""]
    return "\n".join(lines)


def _fish(tree: Tree) -> str:
    groups = " ".join(tree.commands)
    lines = [f"# {PROG} completion for fish (made by `{PROG} completion fish`)",
             f"complete -c {PROG} -f"]
    lines += [f"complete -c {PROG} -n 'not __fish_seen_subcommand_from {groups}' -a {shlex.quote(g)}"
              for g in tree.commands]
    for group, commands in tree.commands.items():
        others = " ".join(commands)
        lines += [f"complete -c {PROG} -n '__fish_seen_subcommand_from {group}; and not __fish_seen_subcommand_from "
                  f"{others}' -a {shlex.quote(c)}" for c in commands]
    for key, options in tree.options.items():
        group, command = key.split(" ")
        when = f"__fish_seen_subcommand_from {group}; and __fish_seen_subcommand_from {command}"
        for option in options:
            if not option.startswith("--"):
                continue
            choices = tree.valued.get(option)
            values = f" -r -a {shlex.quote(' '.join(choices))}" if choices else (" -r" if choices == [] else "")
            lines.append(f"complete -c {PROG} -n '{when}' -l {option[2:]}{values}")
    return "\n".join(lines) + "\n"
