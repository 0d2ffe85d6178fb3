"""Keyed typo noise for customer messages (SPEC §11), applied outside protected spans.

Why markers: the templates know which spans are slot values and which acts may be noised,
the noise does not. Templates therefore emit a *marked* string: control characters that
never occur in catalog text delimit the spans, and this module is the only place that
reads them. ``strip_markers`` gives the clean text, ``add_noise`` the noised one.

- ``PROTECT`` spans: slot values of CLARIFY and CORRECT; never touched.
- ``QUIET`` spans: acts that noise does not apply to (CONFIRM, DONE, ACK, QUIT); never
  touched.
- ``VALUE`` spans: slot values of INFORM / INFORM-update / SWITCH; noise may touch them,
  the markers only let tests find the values in the clean text.

Whatever the markers say, every whitespace-delimited token holding a digit, "$" or "_"
(ids, money, model numbers, dates) is protected too. Draws come from a numpy generator
seeded from the episode key folded by the NOISE stream and the message index
(``message_rng``), so the same episode replays the same typos.
"""

from __future__ import annotations

import functools

import numpy as np

from ecomjax import constants as C

PROTECT = ("\x02", "\x03")
QUIET = ("\x04", "\x05")
VALUE = ("\x0e", "\x0f")
MARKER_CHARS = frozenset(PROTECT + QUIET + VALUE)
_OPENERS = {PROTECT[0]: PROTECT[1], QUIET[0]: QUIET[1], VALUE[0]: VALUE[1]}
_CLOSERS = {v: k for k, v in _OPENERS.items()}

# SPEC §11 step 1: the 16-entry abbreviation map.
ABBREVIATIONS: dict[str, str] = {
    "looking": "lookin",
    "something": "smthg",
    "recommend": "reccomend",
    "please": "pls",
    "product": "prodct",
    "shopping": "shoppin",
    "because": "cuz",
    "delivery": "delivry",
    "available": "availble",
    "alternative": "alterntive",
    "approximately": "approx",
    "information": "info",
    "quantity": "qty",
    "replacement": "replacemnt",
    "different": "diff",
    "interested": "intrested",
}
QWERTY_ROWS: tuple[str, ...] = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_ROW_OF = {c: (row, i) for row in QWERTY_ROWS for i, c in enumerate(row)}
# Character operations and their probabilities (SPEC §11 step 2), as cumulative bounds.
_DROP, _DUP, _SWAP = 0.3, 0.6, 0.8  # then the QWERTY neighbour up to 1.0
_AUTO_PROTECT = frozenset("0123456789$_")


def strip_markers(marked: str) -> str:
    """The clean text of a marked string."""
    return "".join(c for c in marked if c not in MARKER_CHARS)


def _chars(marked: str) -> tuple[list[str], list[bool]]:
    """Plain characters and whether each lies in a PROTECT or QUIET span."""
    chars: list[str] = []
    prot: list[bool] = []
    stack: list[str] = []
    for c in marked:
        if c in _OPENERS:
            stack.append(c)
        elif c in _CLOSERS:
            if not stack or stack[-1] != _CLOSERS[c]:
                raise ValueError("unbalanced span markers")
            stack.pop()
        else:
            chars.append(c)
            prot.append(any(s != VALUE[0] for s in stack))
    if stack:
        raise ValueError("unbalanced span markers")
    return chars, prot


def protected_spans(marked: str) -> list[str]:
    """The outermost PROTECT / QUIET spans, in order (what noise must keep verbatim)."""
    out: list[str] = []
    depth = 0
    buf: list[str] = []
    stack: list[str] = []
    for c in marked:
        if c in _OPENERS:
            if c != VALUE[0]:
                depth += 1
            stack.append(c)
        elif c in _CLOSERS:
            opener = stack.pop()
            if opener != VALUE[0]:
                depth -= 1
                if depth == 0:
                    out.append("".join(buf))
                    buf = []
        elif depth > 0:
            buf.append(c)
    return out


def _auto_protect(chars: list[str], prot: list[bool]) -> list[bool]:
    """Whole tokens with a digit, "$" or "_" (ids, money, numbers) become protected."""
    out = list(prot)
    n = len(chars)
    i = 0
    while i < n:
        if chars[i].isspace():
            i += 1
            continue
        j = i
        while j < n and not chars[j].isspace():
            j += 1
        if any(c in _AUTO_PROTECT for c in chars[i:j]):
            out[i:j] = [True] * (j - i)
        i = j
    return out


def _match_case(word: str, repl: str) -> str:
    if word.isupper() and len(word) > 1:
        return repl.upper()
    if word[0].isupper():
        return repl[0].upper() + repl[1:]
    return repl


def _abbreviate(
    chars: list[str], prot: list[bool], p_word: float, rng
) -> tuple[list[str], list[bool]]:
    """Step 1: free words of the map are replaced with probability ``p_word``."""
    out_c: list[str] = []
    out_p: list[bool] = []
    n = len(chars)
    i = 0
    while i < n:
        if not (chars[i].isascii() and chars[i].isalpha()):
            out_c.append(chars[i])
            out_p.append(prot[i])
            i += 1
            continue
        j = i
        while j < n and chars[j].isascii() and chars[j].isalpha():
            j += 1
        word = "".join(chars[i:j])
        repl = ABBREVIATIONS.get(word.lower())
        free = not any(prot[i:j])
        if repl is not None and free and rng.random() < p_word:
            new = _match_case(word, repl)
            out_c.extend(new)
            out_p.extend([False] * len(new))
        else:
            out_c.extend(chars[i:j])
            out_p.extend(prot[i:j])
        i = j
    return out_c, out_p


def _neighbour(c: str, u: float) -> str:
    """A keyed choice between the left and right QWERTY neighbours, keeping case."""
    hit = _ROW_OF.get(c.lower())
    if hit is None:
        return c
    row, i = hit
    options = [row[k] for k in (i - 1, i + 1) if 0 <= k < len(row)]
    new = options[min(int(u * len(options)), len(options) - 1)]
    return new.upper() if c.isupper() else new


def add_noise(marked: str, p: float, rng) -> str:
    """The clean text of ``marked`` with SPEC §11 typos at rate ``p`` outside protected
    spans; ``rng`` is a ``Draws`` (or any object with ``random``). ``p = 0`` returns
    ``strip_markers(marked)`` exactly."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"noise rate must lie in [0, 1], got {p}")
    chars, prot = _chars(marked)
    prot = _auto_protect(chars, prot)
    if p == 0.0:
        return "".join(chars)
    chars, prot = _abbreviate(chars, prot, min(1.0, 3.0 * p), rng)
    n = len(chars)
    hit = rng.random(n) < p
    kind = rng.random(n)
    side = rng.random(n)
    out: list[str] = []
    i = 0
    while i < n:
        c = chars[i]
        if prot[i] or not c.isalpha() or not hit[i]:
            out.append(c)
            i += 1
            continue
        k = kind[i]
        if k < _DROP:
            pass
        elif k < _DUP:
            out.append(c + c)
        elif k < _SWAP:
            nxt = i + 1
            if nxt < n and not prot[nxt] and chars[nxt].isalpha():
                out.append(chars[nxt] + c)
                i += 2
                continue
            out.append(c)
        else:
            out.append(_neighbour(c, side[i]))
        i += 1
    return "".join(out)


class Draws:
    """Uniform draws from a PCG64 bit stream. Why not ``np.random.Generator``: numpy keeps
    the raw PCG64 output stable across versions but not the Generator's methods, and a
    replayed episode must read the same typos on any numpy. Duck-types the three methods
    the templates and the noise use (``random``, ``integers``, ``permutation``)."""

    def __init__(self, words: list[int]):
        self._bits = np.random.PCG64(np.random.SeedSequence(words))

    def random(self, size: int | None = None):
        raw = self._bits.random_raw(1 if size is None else size)
        u = (raw >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        return float(u[0]) if size is None else u

    def integers(self, n: int) -> int:
        return min(int(self.random() * n), n - 1)

    def permutation(self, n: int) -> list[int]:
        out = list(range(n))
        for i in range(n - 1, 0, -1):  # Fisher-Yates
            j = self.integers(i + 1)
            out[i], out[j] = out[j], out[i]
        return out


@functools.cache
def _fold2():
    """One compiled program for the two fold_ins: eager, they cost a few dispatches each."""
    import jax

    return jax.jit(
        lambda k, tag, i: jax.random.key_data(jax.random.fold_in(jax.random.fold_in(k, tag), i))
    )


def key_rng(key, stream: str, index: int) -> Draws:
    """Draws for item ``index`` of a SPEC §12 stream of the episode key:
    ``fold_in(fold_in(key, tag), index)``, its key words seeding a PCG64 stream."""
    data = _fold2()(key, np.uint32(C.STREAM[stream]), np.uint32(int(index)))
    return Draws(np.asarray(data, np.uint32).ravel().tolist())


def message_rng(key, index: int) -> Draws:
    """Draws of the NOISE stream for customer message ``index`` (opening = 0)."""
    return key_rng(key, "NOISE", index)
