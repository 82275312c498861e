"""Models fitted from observations or profiling: SLO curves, queueing formulas, curve fits."""

from geoslo.models._egress import (
    ARRIVAL_MODEL_KINDS,
    ArrivalModel,
    FilterState,
    arrivals_from_buffers,
    image_arrivals,
    kalman_step,
    predicted_arrival_sd_mb,
    predicted_arrivals,
)
from geoslo.models._interference import best_fitting_curve
from geoslo.models._migration import MigrationCost, MigrationModel
from geoslo.models._queueing import erlang_c, mmc_sojourn_tail, mmc_violation_surface
from geoslo.models._residual import probe_residuals_ms, residual_from_probes
from geoslo.models._scads import (
    PAPER_MIXES_READ_FRACTION,
    CopyDurationModel,
    SteadyStateModel,
    fit_copy_duration,
    fit_steady_state,
    mix_crossing_samples,
)
from geoslo.models._slo_curves import (
    ServiceProfile,
    SloCurve,
    SloSurface,
    build_slo_surface,
    profile_backend,
    profile_loads,
    saturation_rps,
)
from geoslo.models._storage_service import (
    PairSamples,
    StorageMeasurements,
    StorageServiceModel,
    concurrent_monte_carlo,
    infer_storage_model,
    ks_distance,
)

__all__ = [
    "MigrationCost",
    "MigrationModel",
    "ARRIVAL_MODEL_KINDS",
    "ArrivalModel",
    "FilterState",
    "arrivals_from_buffers",
    "image_arrivals",
    "kalman_step",
    "predicted_arrival_sd_mb",
    "predicted_arrivals",
    "PAPER_MIXES_READ_FRACTION",
    "CopyDurationModel",
    "SteadyStateModel",
    "fit_copy_duration",
    "fit_steady_state",
    "mix_crossing_samples",
    "PairSamples",
    "StorageMeasurements",
    "StorageServiceModel",
    "concurrent_monte_carlo",
    "infer_storage_model",
    "ks_distance",
    "probe_residuals_ms",
    "residual_from_probes",
    "ServiceProfile",
    "SloCurve",
    "SloSurface",
    "best_fitting_curve",
    "build_slo_surface",
    "erlang_c",
    "mmc_sojourn_tail",
    "mmc_violation_surface",
    "profile_backend",
    "profile_loads",
    "saturation_rps",
]
