"""A minimal protobuf *text format* reader, enough for Google's robotstxt-spec-test files.

Messages become dicts mapping a field name to a list of values (fields repeat); strings
are ``bytes`` (C-style escapes decoded, adjacent literals concatenated); enum values and
numbers stay ``str``.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(
    r"""\s+|\#[^\n]*|(?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|(?P<punct>[:{}\[\],;<>])|(?P<word>[A-Za-z0-9_.+-]+)""",
    re.S,
)
_SIMPLE_ESCAPES = {"n": 10, "t": 9, "r": 13, '"': 34, "'": 39, "\\": 92, "a": 7, "b": 8, "f": 12, "v": 11, "?": 63}


def _unescape(literal: str) -> bytes:
    body = literal[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode("utf-8")
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[nxt])
            i += 2
        elif nxt in "xX":
            m = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2 :])
            assert m, literal
            out.append(int(m.group(), 16))
            i += 2 + len(m.group())
        elif nxt in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1 :])
            assert m
            out.append(int(m.group(), 8) & 0xFF)
            i += 1 + len(m.group())
        else:
            raise ValueError(f"unknown escape \\{nxt} in {literal!r}")
    return bytes(out)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"cannot tokenize at {pos}: {text[pos : pos + 30]!r}")
        pos = m.end()
        for kind in ("str", "punct", "word"):
            if m.group(kind) is not None:
                tokens.append((kind, m.group(kind)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def message(self, end: str | None) -> dict[str, list[Any]]:
        fields: dict[str, list[Any]] = {}
        while True:
            tok = self.peek()
            if tok is None or (tok[0] == "punct" and tok[1] == end):
                return fields
            if tok[0] == "punct" and tok[1] in ",;":
                self.take()
                continue
            kind, name = self.take()
            assert kind == "word", (kind, name)
            if self.peek() == ("punct", ":"):
                self.take()
            fields.setdefault(name, []).extend(self.value())

    def value(self) -> list[Any]:
        kind, tok = self.take()
        if kind == "punct" and tok in "{<":
            msg = self.message("}" if tok == "{" else ">")
            self.take()
            return [msg]
        if kind == "punct" and tok == "[":
            values: list[Any] = []
            while self.peek() != ("punct", "]"):
                if self.peek() == ("punct", ","):
                    self.take()
                    continue
                values.extend(self.value())
            self.take()
            return values
        if kind == "str":
            data = _unescape(tok)
            while self.peek() is not None and self.peek()[0] == "str":  # type: ignore[index]
                data += _unescape(self.take()[1])
            return [data]
        return [tok]


def parse_text_format(text: str) -> dict[str, list[Any]]:
    return _Parser(text).message(None)
