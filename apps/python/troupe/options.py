"""troupe.run's settings: a script's own flags (troupe.Flag, argparse-style, returned typed)
and keyword options named as the flags (mode="dp", workers=2), checked before anything starts.
Used by launch.py; users meet Flag and Flags."""
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import _native


@dataclass(frozen=True)
class Flag:
    """One flag of a script, as argparse's add_argument: --NAME VALUE, read as `type`.

    name:    the flag's name, "train-limit" (or "--train-limit"); its value is
             flags["train-limit"], or flags.train_limit.
    type:    str, int, float, or any callable of the text (as argparse's type=); a value it
             refuses (ValueError, TypeError) stops the job at start, naming the flag.
    default: the value when the flag is not given (read as `type` when it is a str).
    """
    name: str
    type: Callable[[str], Any] = str
    default: Any = None
    help: str = ""
    metavar: Optional[str] = None

    def __post_init__(self):
        object.__setattr__(self, "name", self.name.lstrip("-"))
        if not self.name or " " in self.name:
            raise ValueError(f"troupe.Flag: not a flag name: {self.name!r}")
        if not callable(self.type):
            raise TypeError(f"troupe.Flag --{self.name}: type must be callable, not "
                            f"{self.type!r}")

    def row(self):
        """(name, metavar, help, default text, kind) for the native flag table."""
        metavar = self.metavar or {int: "N", float: "X"}.get(self.type, "VALUE")
        default = "" if self.default is None else str(self.default)
        return (self.name, metavar, self.help, default, "text")

    def read(self, text):
        """The flag's text as its type; ValueError naming the flag."""
        if text == "" and self.default is None:
            return None
        try:
            return self.type(text)
        except (TypeError, ValueError) as e:
            kind = getattr(self.type, "__name__", repr(self.type))
            raise ValueError(f"--{self.name}: invalid {kind} value: {text!r} ({e})") from None


# The types the native table checks itself for (name, metavar, help, default, kind) rows.
def _whole(text):
    return int(float(text))


_KINDS = {"text": str, "whole": _whole, "number": float}


def as_flag(declared):
    """A Flag of a troupe.Flag or of an older (name, metavar, help, default[, kind]) tuple."""
    if isinstance(declared, Flag):
        return declared
    row = tuple(declared)
    if len(row) not in (4, 5):
        raise TypeError(f"troupe.run: a flag is a troupe.Flag, not {declared!r}")
    name, metavar, text, default, *kind = row
    kind = kind[0] if kind else "text"
    if kind not in _KINDS:
        raise ValueError(f"troupe.run: flag --{name}: kind {kind!r} is not text, number or "
                         "whole")
    return _Row(name, _KINDS[kind], default, text, metavar, kind)


@dataclass(frozen=True)
class _Row(Flag):
    """A tuple-declared flag: its kind is checked by the native table when parsed."""
    kind: str = "text"

    def row(self):
        return (self.name, self.metavar or "", self.help, str(self.default), self.kind)


class Flags(dict):
    """The values of a job's flags, typed: flags["train-limit"] or flags.train_limit."""

    def __getattr__(self, name):
        for key in (name, name.replace("_", "-")):
            if key in self:
                return self[key]
        raise AttributeError(f"no flag --{name.replace('_', '-')}")


def typed(values, declared):
    """The native table's values (str) as Flags, each declared flag read as its type."""
    out = Flags(values)
    for flag in declared:
        if flag.name in out:
            out[flag.name] = flag.read(out[flag.name])
    return out


def _text(flag, value, is_switch):
    """The flag text of a keyword option's value; TypeError for a value of the wrong kind."""
    if is_switch:
        if not isinstance(value, bool):
            raise TypeError(f"troupe.run: {flag.replace('-', '_')}= is a switch: True or False, "
                            f"not {type(value).__name__}")
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_text(flag, v, False) for v in value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float, os.PathLike)):
        raise TypeError(f"troupe.run: {flag.replace('-', '_')}= takes a str, a number or a "
                        f"list of them, not {type(value).__name__}")
    return str(os.fspath(value)) if isinstance(value, os.PathLike) else str(value)


def defaults_of(options, declared):
    """troupe.run's keyword options as {flag name: text}: TypeError for an unknown name or a
    value of the wrong kind, ValueError for a value its flag refuses. None leaves a flag out."""
    common = dict(_native.common_flags())
    mine = {flag.name: flag for flag in declared}
    out = {}
    for key, value in options.items():
        name = key.replace("_", "-")
        if name not in common and name not in mine:
            raise TypeError(f"troupe.run() got an unexpected keyword argument '{key}' (no flag "
                            f"--{name}; see --help)")
        if value is None:
            continue
        text = _text(name, value, common.get(name, False))
        if name in mine:
            if isinstance(mine[name], _Row):  # a kind the flags' parser checks
                if (why := _native.check_app_flag(mine[name].row(), text)):
                    raise ValueError(f"troupe.run: {key}={value!r}: {why}")
            else:
                mine[name].read(text)
        elif (why := _native.check_flag(name, text)):
            raise ValueError(f"troupe.run: {key}={value!r}: {why}")
        out[name] = text
    return out
