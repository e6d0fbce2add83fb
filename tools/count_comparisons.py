"""Count the live comparisons one run of the book made, against the budget the threshold was set for (#38).

Usage (``make nbval`` runs it): python tools/count_comparisons.py _build/comparisons.log

Every ``LiveCheck`` comparison appends a line to the file named by ``ATTENTION_COURSE_COMPARISON_LOG`` (check,
agrees, name). ``evidence.threshold`` splits the book's false-alarm budget (``BOOK_FALSE_ALARM``) over
``BOOK_COMPARISONS``: a book that makes more comparisons than that spends more than its budget, and this fails;
raise the constant (the threshold widens a little) or compare less.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from attention_course.evidence import BOOK_COMPARISONS, BOOK_FALSE_ALARM


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__)
        return 2
    path = Path(args[0])
    lines = path.read_text().splitlines() if path.is_file() else []
    if not lines:  # nbval ran and nothing was logged: the log is not reaching the kernels, not a book without checks
        print(f"no live comparison was logged in {path}")
        return 1
    kinds = Counter(line.split("\t", 1)[0] for line in lines)
    print(f"live comparisons made: {len(lines)} (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
          + f"); budget: {BOOK_COMPARISONS} sharing a {BOOK_FALSE_ALARM:.0%} chance of any false alarm")
    if len(lines) > BOOK_COMPARISONS:
        print(f"the book made {len(lines)} comparisons, more than evidence.BOOK_COMPARISONS = {BOOK_COMPARISONS}: "
              "raise it, or compare less")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
