"""Bad inputs for every public name of the package, one module here per package module (issue #13).

A case is a call that must raise ``error`` with a message that names the argument (``arg``), says what it got
("got …") and what was expected ("must"/"expected"). ``covers`` lists the public objects the case exercises; the
coverage test (tests/test_bad_inputs.py) fails when a name in any module's ``__all__`` has no case.

Write cases with :func:`case`::

    CASES = [
        case(softmax, lambda: softmax([1.0, 2.0]), TypeError, arg="x"),
    ]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BadInput:
    covers: tuple[object, ...]  #: the public functions/classes this case feeds a bad input to
    call: Callable[[], object]  #: the call that must fail
    error: type[Exception]  #: TypeError for a wrong kind, ValueError for a wrong value
    arg: str  #: the argument's name, which the message must contain
    says: tuple[str, ...]  #: further words the message must contain
    id: str


def case(
    covers: object | tuple[object, ...],
    call: Callable[[], object],
    error: type[Exception],
    *,
    arg: str,
    says: str | tuple[str, ...] = (),
    id: str = "",
) -> BadInput:
    covers = covers if isinstance(covers, tuple) else (covers,)
    says = (says,) if isinstance(says, str) else tuple(says)
    name = getattr(covers[0], "__name__", type(covers[0]).__name__)
    return BadInput(covers, call, error, arg, says, id or f"{name}-{arg}")
