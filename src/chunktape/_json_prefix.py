"""Whether a text is JSON that stopped early: the arguments of a tool call a token limit cut.

A provider that reaches its token limit inside a tool call's arguments sends them as far as they got, so they are
the start of some JSON text; junk after a complete value, or a character no JSON text can have there, is not a
cut but a broken stream. Neither ``json`` nor msgspec says which of the two an invalid text is, and jiter's
partial mode also accepts junk after a complete value, so this is the grammar's own small automaton.
"""

from __future__ import annotations

__all__ = ["unfinished_json"]

_WHITESPACE = frozenset(" \t\n\r")
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = frozenset('"\\/bfnrtu')
_LITERALS = {"t": "true", "f": "false", "n": "null"}
_NUMBER_ENDS = frozenset({"zero", "int", "frac", "exp"})
"""The number states a number may end in (after ``0``, digits, fraction digits or exponent digits)."""


def unfinished_json(text: str) -> bool:
    """Whether ``text`` is a proper prefix of a JSON text: no character so far breaks the grammar, and the value is
    not complete yet (whitespace alone counts: the limit fell before the first character)."""
    return _Scan().run(text) == "unfinished"


class _Scan:
    """One pass over the text: a stack of open containers and the state inside the innermost."""

    def __init__(self) -> None:
        self.stack: list[str] = []  # "{" or "["
        self.state = "value"  # value, first-value, key, first-key, colon, after, string, number, literal, done
        self.is_key = False
        self.escape = 0  # 0: none; 1: after a backslash; 2-5: hex digits of a \u escape still to come
        self.number = ""
        self.literal = ""
        self.matched = 0

    def run(self, text: str) -> str:
        for char in text:
            if not self._step(char):
                return "invalid"
        if self.state == "done" or (self.state == "number" and not self.stack and self.number in _NUMBER_ENDS):
            return "complete"
        return "unfinished"

    def _step(self, char: str) -> bool:
        match self.state:
            case "string":
                return self._string(char)
            case "number":
                if self._number(char):
                    return True
                if self.number not in _NUMBER_ENDS:
                    return False
                self._value_done()
                return self._step(char)
            case "literal":
                self.matched += 1
                if char != self.literal[self.matched - 1]:
                    return False
                if self.matched == len(self.literal):
                    self._value_done()
                return True
        if char in _WHITESPACE:
            return True
        match self.state:
            case "value" | "first-value":
                if char == "]" and self.state == "first-value":
                    return self._close("[")
                return self._value(char)
            case "key" | "first-key":
                if char == "}" and self.state == "first-key":
                    return self._close("{")
                if char != '"':
                    return False
                self.state, self.is_key = "string", True
                return True
            case "colon":
                if char != ":":
                    return False
                self.state = "value"
                return True
            case "after":
                if char == ",":
                    self.state = "key" if self.stack[-1] == "{" else "value"
                    return True
                return self._close("{" if char == "}" else "[" if char == "]" else "")
        return False  # "done": nothing may follow a complete value but whitespace

    def _value(self, char: str) -> bool:
        if char in "{[":
            self.stack.append(char)
            self.state = "first-key" if char == "{" else "first-value"
        elif char == '"':
            self.state, self.is_key = "string", False
        elif char == "-" or char in _DIGITS:
            self.state, self.number = "number", ""
            return self._number(char)
        elif char in _LITERALS:
            self.state, self.literal, self.matched = "literal", _LITERALS[char], 1
        else:
            return False
        return True

    def _string(self, char: str) -> bool:
        if self.escape == 1:
            if char not in _ESCAPES:
                return False
            self.escape = 5 if char == "u" else 0
        elif self.escape > 1:
            if char not in _HEX:
                return False
            self.escape = 0 if self.escape == 2 else self.escape - 1
        elif char == "\\":
            self.escape = 1
        elif char == '"':
            if self.is_key:
                self.state = "colon"
            else:
                self._value_done()
        elif ord(char) < 0x20:
            return False
        return True

    def _number(self, char: str) -> bool:
        """Advance the number's state by ``char``; False when ``char`` cannot continue it."""
        state = self.number
        if char in _DIGITS:
            moves = {"": "zero" if char == "0" else "int", "sign": "zero" if char == "0" else "int", "int": "int"}
            moves |= {"dot": "frac", "frac": "frac", "e": "exp", "esign": "exp", "exp": "exp"}
            if state not in moves:
                return False  # a digit after a leading 0
            self.number = moves[state]
        elif char == "-" and state in ("", "e"):
            self.number = "sign" if state == "" else "esign"
        elif char == "+" and state == "e":
            self.number = "esign"
        elif char == "." and state in ("zero", "int"):
            self.number = "dot"
        elif char in "eE" and state in ("zero", "int", "frac"):
            self.number = "e"
        else:
            return False
        return True

    def _value_done(self) -> None:
        self.state = "after" if self.stack else "done"

    def _close(self, opener: str) -> bool:
        if not self.stack or self.stack[-1] != opener:
            return False
        self.stack.pop()
        self._value_done()
        return True
