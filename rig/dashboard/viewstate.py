"""What the person at the terminal chose: the focused rollout, the page, a search in progress.

How this works: `ViewState.key(name, order, per_page)` applies one key (names from
`rig.dashboard.keys`) given the rollout ids in display order and the rows a page holds. Moving
the focus (n/p, arrows) brings its page into view; paging (PgDn/PgUp, space/b, g/G) moves
the page and leaves the focus where it is; `/` starts a search by name, Enter focuses the best
match (exact, then prefix, then substring, in display order), Esc cancels; Esc outside a
search returns to following the first active rollout; `q` quits the view. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NEXT = frozenset({"n", "j", "down", "tab"})
PREV = frozenset({"p", "k", "up"})
PAGE_DOWN = frozenset({"pgdn", " ", "f"})
PAGE_UP = frozenset({"pgup", "b"})
HELP = "n/p: next/prev · PgDn/PgUp: page · /: find rollout · Esc: follow · q: close view"


def best_match(text: str, order: Sequence[str]) -> str | None:
    """The rollout id `text` names: exact, else prefix, else substring (case-insensitive)."""
    t = text.strip().lower()
    if not t:
        return None
    lowered = [(rid, rid.lower()) for rid in order]
    for test in (str.__eq__, str.startswith, str.__contains__):
        for rid, low in lowered:
            if test(low, t):
                return rid
    return None


@dataclass(slots=True)
class ViewState:
    focus: str | None = None  # rollout in the detail panel; None: follow the first active one
    page: int = 0
    search: str | None = None  # the text typed after "/", None when not searching
    message: str | None = None  # one-line feedback (e.g. no match)
    quit: bool = False

    def pages(self, n_rows: int, per_page: int) -> int:
        return max(1, -(-n_rows // max(1, per_page)))

    def clamp(self, n_rows: int, per_page: int) -> None:
        self.page = max(0, min(self.page, self.pages(n_rows, per_page) - 1))

    def show(self, rollout_id: str, order: Sequence[str], per_page: int) -> None:
        """Focus `rollout_id` and turn to its page."""
        self.focus = rollout_id
        if rollout_id in order:
            self.page = order.index(rollout_id) // max(1, per_page)

    def key(self, name: str, order: Sequence[str], per_page: int, current: str | None) -> None:
        """Apply one key. `current`: the rollout the detail panel shows now (focus or auto)."""
        if self.search is not None:
            self._search_key(name, order, per_page)
            return
        self.message = None
        if name in ("q", "Q"):
            self.quit = True
        elif name in NEXT or name in PREV:
            if order:
                i = order.index(current) if current in order else -1
                step = 1 if name in NEXT else -1
                if i < 0:
                    i = 0 if step > 0 else len(order) - 1
                else:
                    i = (i + step) % len(order)
                self.show(order[i], order, per_page)
        elif name in PAGE_DOWN:
            self.page += 1
        elif name in PAGE_UP:
            self.page -= 1
        elif name in ("home", "g"):
            self.page = 0
        elif name in ("end", "G"):
            self.page = self.pages(len(order), per_page) - 1
        elif name == "/":
            self.search = ""
        elif name == "esc":
            self.focus = None
        self.clamp(len(order), per_page)

    def _search_key(self, name: str, order: Sequence[str], per_page: int) -> None:
        assert self.search is not None
        if name == "esc":
            self.search = None
        elif name == "enter":
            found = best_match(self.search, order)
            if found is None:
                self.message = f"no rollout matches {self.search!r}"
            else:
                self.show(found, order, per_page)
                self.message = None
            self.search = None
        elif name == "backspace":
            self.search = self.search[:-1]
        elif len(name) == 1 and name.isprintable():
            self.search += name
