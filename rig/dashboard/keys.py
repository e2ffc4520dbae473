"""Terminal keys: what a cbreak-mode stdin sends, as key names. Sans-I/O.

`KeyDecoder.feed(text)` returns names: single characters for printable keys, and "up",
"down", "pgup", "pgdn", "home", "end", "enter", "esc", "backspace", "tab" for the rest. An
escape sequence cut between two reads is kept until its end arrives; a lone ESC at the end
of a read is the Esc key (terminals send whole sequences in one write).
"""

from __future__ import annotations

SEQUENCES: dict[str, str] = {
    "\x1b[A": "up",
    "\x1b[B": "down",
    "\x1bOA": "up",
    "\x1bOB": "down",
    "\x1b[5~": "pgup",
    "\x1b[6~": "pgdn",
    "\x1b[H": "home",
    "\x1b[F": "end",
    "\x1bOH": "home",
    "\x1bOF": "end",
    "\x1b[1~": "home",
    "\x1b[4~": "end",
    "\x1b[7~": "home",
    "\x1b[8~": "end",
}
SINGLE: dict[str, str] = {
    "\r": "enter",
    "\n": "enter",
    "\t": "tab",
    "\x7f": "backspace",
    "\b": "backspace",
}
_MAX_SEQ = max(len(s) for s in SEQUENCES)


class KeyDecoder:
    def __init__(self) -> None:
        self._pending = ""

    def feed(self, text: str) -> list[str]:
        buf = self._pending + text
        self._pending = ""
        out: list[str] = []
        i = 0
        while i < len(buf):
            ch = buf[i]
            if ch != "\x1b":
                out.append(SINGLE.get(ch, ch))
                i += 1
                continue
            rest = buf[i : i + _MAX_SEQ]
            match = next((s for s in SEQUENCES if rest.startswith(s)), None)
            if match is not None:
                out.append(SEQUENCES[match])
                i += len(match)
                continue
            if len(rest) > 1 and any(s.startswith(rest) for s in SEQUENCES):
                self._pending = rest  # a sequence cut by the read: wait for its end
                break
            if len(rest) > 1 and rest[1] in "[O":
                # an unknown sequence: skip to its final byte (a letter or ~)
                j = i + 2
                while j < len(buf) and not (buf[j].isalpha() or buf[j] == "~"):
                    j += 1
                i = j + 1
                continue
            out.append("esc")
            i += 1
        return out
