"""Checks of constructor arguments: each returns the value or raises an error naming it.

Constructors call these before storing an argument, so a value that is not
what it claims to be (a negative layer count, a block size of 2.5, a dropout
of 1.5, an unknown activation) fails at once with its name, never as a silent
wrong model or an error from deep inside a backend. Booleans are not counts,
and `2.0` is not an integer.

>>> positive_int("num_layers", 2)
2
>>> positive_int("num_layers", -1)
Traceback (most recent call last):
...
ValueError: num_layers must be a positive integer; received -1.
>>> probability("dropout", 0.1)
0.1
"""

import math
import numbers


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def integer(name, value, minimum, optional=False):
    """`value` as an `int` if it is an integer `>= minimum` (or `None` when `optional`).

    >>> integer("position_offset", 0, minimum=0)
    0
    """
    if value is None and optional:
        return None
    if not _is_int(value) or value < minimum:
        kind = {0: "a non-negative integer", 1: "a positive integer"}.get(
            minimum, f"an integer >= {minimum}"
        )
        kind += " or None" if optional else ""
        raise ValueError(f"{name} must be {kind}; received {value!r}.")
    return int(value)


def positive_int(name, value, optional=False):
    """`value` as an `int` if it is an integer `>= 1` (or `None` when `optional`)."""
    return integer(name, value, 1, optional)


def non_negative_int(name, value, optional=False):
    """`value` as an `int` if it is an integer `>= 0` (or `None` when `optional`)."""
    return integer(name, value, 0, optional)


def number(name, value, low=None, high=None, *, low_open=False, high_open=False, optional=False):
    """`value` as a `float` if it is a real number inside the interval (bounds `None` = none).

    >>> number("mask_rate", 1.0, 0, 1, low_open=True)
    1.0
    >>> number("temperature", 0, 0, None, low_open=True)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be a number in (0, inf); received 0.
    """
    if value is None and optional:
        return None
    inside = _is_real(value) and math.isfinite(value)  # NaN and inf are inside nothing
    if inside and low is not None:
        inside = value > low if low_open else value >= low
    if inside and high is not None:
        inside = value < high if high_open else value <= high
    if not inside:
        interval = (
            f"{'(' if low_open or low is None else '['}{'-inf' if low is None else low}, "
            f"{'inf' if high is None else high}{')' if high_open or high is None else ']'}"
        )
        raise ValueError(f"{name} must be a number in {interval}; received {value!r}.")
    return float(value)


def probability(name, value, optional=False):
    """`value` as a `float` in `[0, 1)`: a dropout or a mask rate."""
    return number(name, value, 0, 1, high_open=True, optional=optional)


def positive_number(name, value, optional=False):
    """`value` as a `float` `> 0`: an epsilon, a temperature, a scale."""
    return number(name, value, 0, None, low_open=True, optional=optional)


def one_of(name, value, choices):
    """`value` if it is one of `choices`.

    >>> one_of("attention", "dense", ("dense", "bigbird"))
    'dense'
    """
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}; received {value!r}.")
    return value


def head_counts(name, counts, num_layers, num_heads):
    """`counts` as a list of `num_layers` ints in `[1, num_heads]`, or None: heads per layer after pruning.

    >>> head_counts("heads_per_layer", (4, 1), num_layers=2, num_heads=4)
    [4, 1]
    """
    if counts is None:
        return None
    checked = [positive_int(name, count) for count in counts]
    if len(checked) != num_layers or max(checked) > num_heads:
        raise ValueError(
            f"{name} must list num_layers={num_layers} head counts of at most "
            f"num_heads={num_heads}; received {list(counts)}."
        )
    return checked


def no_unknown_keywords(owner, keywords, known=()):
    """Raise a `TypeError` naming the keywords of `keywords` that are not in `known`.

    >>> no_unknown_keywords("bert_tiny", {"num_layer": 2}, known=("num_layers",))
    Traceback (most recent call last):
    ...
    TypeError: Unknown argument(s) for bert_tiny: num_layer. Known: num_layers.
    """
    unknown = sorted(set(keywords) - set(known))
    if unknown:
        raise TypeError(
            f"Unknown argument(s) for {owner}: {', '.join(unknown)}. "
            f"Known: {', '.join(sorted(known))}."
        )
