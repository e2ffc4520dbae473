"""The lower-envelope line of a point cloud: the linear programme of Moon, Skelly and Towsley.

How this works
--------------
Find the line y = a + b x that lies on or below every point and minimises the total
vertical distance of the points above it:

    minimise  sum_i (y_i - a - b x_i)   subject to   a + b x_i <= y_i  for all i.

The objective equals sum(y) - n * (a + b * mean(x)), so the LP maximises the line's height
at x = mean(x) while staying under all points. The highest such height is the lower convex
hull at mean(x), and an optimal line is the hull edge that spans mean(x).

We do not build the whole hull. Starting from the point that supports a rough first slope,
we walk along the hull towards mean(x) one vertex at a time (a gift-wrapping step, one
vectorised pass over the points each), and stop at the edge that spans mean(x). A random
cloud's hull has O(log n) vertices, so this is a handful of O(n) numpy passes. If the walk
runs long (a pathological, nearly convex cloud), it falls back to Andrew's monotone chain
over the sorted points, O(n log n).

Inputs are float64 coordinates already made small by the caller (references subtracted),
so every integer ns below 2**53 is represented exactly.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_MAX_WALK_STEPS = 64


def lower_envelope_line(x: FloatArray, y: FloatArray) -> tuple[float, float]:
    """(a, b) of the LP lower-envelope line y = a + b x. Needs at least two distinct x."""
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("x and y must be 1-D arrays of the same length")
    x_mean = float(x.mean())
    if not float(x.min()) < float(x.max()):
        raise ValueError("the envelope slope needs at least two distinct x values")
    edge = _walk_to_mean(x, y, x_mean)
    if edge is None:
        edge = _hull_edge_at(x, y, x_mean)
    i, j = edge
    b = (y[j] - y[i]) / (x[j] - x[i])
    a = y[i] - b * x[i]
    return float(a), float(b)


def upper_envelope_line(x: FloatArray, y: FloatArray) -> tuple[float, float]:
    """(a, b) of the line on or above every point, closest to them in total (the mirror)."""
    a, b = lower_envelope_line(x, -y)
    return -a, -b


def _first_slope(x: FloatArray, y: FloatArray) -> float:
    """A rough slope: between the lowest point of the first and of the last third in x."""
    lo, hi = float(x.min()), float(x.max())
    third = (hi - lo) / 3.0
    left = x <= lo + third
    right = x >= hi - third
    il = int(np.flatnonzero(left)[np.argmin(y[left])])
    ir = int(np.flatnonzero(right)[np.argmin(y[right])])
    if x[ir] == x[il]:
        return 0.0
    return float((y[ir] - y[il]) / (x[ir] - x[il]))


def _walk_to_mean(x: FloatArray, y: FloatArray, x_mean: float) -> tuple[int, int] | None:
    """Walk the lower hull from a supporting point to the edge spanning x_mean."""
    b0 = _first_slope(x, y)
    k = int(np.argmin(y - b0 * x))
    # Among points with equal support value prefer one nearer the mean (fewer steps).
    for _ in range(_MAX_WALK_STEPS):
        if x[k] <= x_mean:
            mask = x > x[k]
            idx = np.flatnonzero(mask)
            slopes = (y[idx] - y[k]) / (x[idx] - x[k])
            s_min = slopes.min()
            ties = idx[slopes <= s_min]
            j = int(ties[np.argmax(x[ties])])  # farthest of collinear points
            if x[j] >= x_mean:
                return k, j
        else:
            mask = x < x[k]
            idx = np.flatnonzero(mask)
            slopes = (y[k] - y[idx]) / (x[k] - x[idx])
            s_max = slopes.max()
            ties = idx[slopes >= s_max]
            j = int(ties[np.argmin(x[ties])])
            if x[j] <= x_mean:
                return j, k
        k = j
    return None


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def _hull_edge_at(x: FloatArray, y: FloatArray, x_mean: float) -> tuple[int, int]:
    """Andrew's monotone chain (lower hull), then the edge spanning x_mean."""
    order = np.lexsort((y, x))
    hull: list[int] = []
    pts: list[tuple[float, float]] = []
    for i in order.tolist():
        p = (float(x[i]), float(y[i]))
        if pts and pts[-1][0] == p[0]:
            continue  # same x, higher (or equal) y: never on the lower hull
        while len(pts) >= 2 and _cross(pts[-2], pts[-1], p) <= 0:
            pts.pop()
            hull.pop()
        pts.append(p)
        hull.append(i)
    for left, right in zip(hull, hull[1:], strict=False):
        if x[left] <= x_mean <= x[right]:
            return left, right
    raise AssertionError("mean x outside the hull")  # unreachable: min(x) <= mean <= max(x)
