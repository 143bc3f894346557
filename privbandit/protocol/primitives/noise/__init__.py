"""Noise samplers: per-user shares and the laws their sums follow.

Every sampler takes an explicit ``numpy.random.Generator`` and returns int64 (discrete) or float64
(grid Laplace: multiples of a fixed grid step) arrays, vectorized over users.
"""

from privbandit.protocol.primitives.noise.grid_laplace import LAPLACE_GRID, grid_laplace, grid_laplace_scale
from privbandit.protocol.primitives.noise.polya import (
    discrete_laplace_pmf,
    discrete_laplace_variance,
    sample_discrete_laplace,
    sample_polya,
    sample_polya_shares,
)
from privbandit.protocol.primitives.noise.skellam import sample_skellam, skellam_pmf

__all__ = [
    "LAPLACE_GRID",
    "grid_laplace",
    "grid_laplace_scale",
    "discrete_laplace_pmf",
    "discrete_laplace_variance",
    "sample_discrete_laplace",
    "sample_polya",
    "sample_polya_shares",
    "sample_skellam",
    "skellam_pmf",
]
