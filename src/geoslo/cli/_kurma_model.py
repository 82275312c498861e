"""``geoslo kurma model``: the model file Kurma's agents read (``model_file``), every site's
SLO curves (§4), for stores of one's own: from the queueing formula at a measured
saturation point, or from a profile of the store by address (§4.1). docs/live.md, "Point it
at your own Redis", step 2."""

from __future__ import annotations

import math
import os
import ssl
from pathlib import Path
from typing import Annotated

import typer

from geoslo.errors import InputError

__all__ = ["kurma_model"]

MAX_SITES = 16  # as an agent's `sites`


def kurma_model(
    sites: Annotated[
        str, typer.Option(help="Every site, comma-separated, in the order every agent lists them.")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The model file to write (.npz).")
    ] = Path("kurma-model.npz"),
    saturation_rps: Annotated[
        str | None,
        typer.Option(
            help="A site's saturation point in req/s (one for every site, or one per site, "
            "comma-separated; e.g. from redis-benchmark): each server an M/M/1 queue (§4)."
        ),
    ] = None,
    servers_per_site: Annotated[
        int, typer.Option(help="Servers per site, for --saturation-rps or --service-mean-ms.")
    ] = 1,
    service_mean_ms: Annotated[
        float | None,
        typer.Option(
            help="Instead of --saturation-rps: a server's mean service time (exponential; "
            "saturation = servers x 1000 / mean)."
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT[,HOST:PORT]: one site's servers, profiled open loop with GETs only "
            "(never a write; §4.1); every site is taken to be like it."
        ),
    ] = None,
    max_rps: Annotated[float, typer.Option(help="--profile: the highest load offered.")] = 1000.0,
    points: Annotated[int, typer.Option(help="--profile: loads, evenly spaced up to max.")] = 8,
    seconds_per_point: Annotated[int, typer.Option(help="--profile: seconds at each load.")] = 5,
    password_file: Annotated[
        Path | None, typer.Option(help="--profile: the store's AUTH password (owner-only file).")
    ] = None,
    tls_ca_file: Annotated[
        Path | None, typer.Option(help="--profile: connect over TLS, trusting this CA.")
    ] = None,
    max_late_ms: Annotated[
        float,
        typer.Option(
            help="--profile: stop if the load generator runs later than this (ms): one "
            "behind its load falls further behind every second; a busy machine's stall does not."
        ),
    ] = 1000.0,
    slo_ms: Annotated[float, typer.Option(help="The SLO (§7: 30 ms at the 95th pct).")] = 30.0,
    residual_rtt_mean_ms: Annotated[
        float,
        typer.Option(
            help="The WAN's latency over the base RTT between sites, exponential of this mean "
            "(§4.2, §6; the testbed's is 0.5 ms); 0: none."
        ),
    ] = 0.0,
) -> None:
    """Write the model file Kurma's agents read (model_file): every site's SLO curves (§4),
    from a queueing formula at a measured saturation point (--saturation-rps or
    --service-mean-ms), or from a profile of your store (--profile). One paragraph of
    summary on stdout; the profile's progress on stderr."""
    from geoslo.control.kurma import save_model

    names = parse_sites(sites)
    _check_output(output)
    _check_number(slo_ms, "--slo-ms", 0, 10_000)
    _check_number(residual_rtt_mean_ms, "--residual-rtt-mean-ms", 0, 1000, low_open=False)
    if profile is None:
        model, source = _queueing(names, saturation_rps, servers_per_site, service_mean_ms,
                                  slo_ms, residual_rtt_mean_ms)  # fmt: skip
    else:
        if saturation_rps is not None or service_mean_ms is not None:
            raise InputError("--profile", "give --profile or a saturation point, not both")
        model, source = _profiled(
            names, profile, max_rps, points, seconds_per_point, password_file, tls_ca_file,
            max_late_ms, slo_ms, residual_rtt_mean_ms,
        )  # fmt: skip
    save_model(model, output)
    typer.echo(model_summary(model, output, slo_ms, source))


def parse_sites(text: str) -> tuple[str, ...]:
    """The comma-separated site names: 2 to MAX_SITES, each once."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names) or not 2 <= len(names) <= MAX_SITES:
        raise InputError("--sites", f"give 2 to {MAX_SITES} site names, comma-separated")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InputError("--sites", f"each site once; repeated: {', '.join(repeated)}")
    return names


def parse_addresses(text: str) -> tuple[tuple[str, int], ...]:
    """``HOST:PORT[,HOST:PORT]``: one site's servers."""
    from geoslo.runtime._config import parse_listen

    addresses = []
    for item in text.split(","):
        try:
            host, port = parse_listen(item.strip())
        except ValueError as error:
            raise InputError("--profile", str(error)) from None
        if port == 0:
            raise InputError("--profile", f"{item.strip()!r} needs the server's port")
        addresses.append((host, port))
    return tuple(addresses)


def parse_rates(text: str, n_sites: int) -> tuple[float, ...]:
    """``--saturation-rps``: one rate for every site, or one per site; each > 0."""
    try:
        rates = tuple(float(item) for item in text.split(","))
    except ValueError:
        raise InputError("--saturation-rps", f"must be numbers (req/s), not {text!r}") from None
    if len(rates) not in (1, n_sites):
        raise InputError("--saturation-rps", f"give one rate, or one per site ({n_sites})")
    for rate in rates:
        _check_number(rate, "--saturation-rps", 0, math.inf)
    return rates * n_sites if len(rates) == 1 else rates


def _check_number(
    value: float, option: str, low: float, high: float, low_open: bool = True
) -> None:
    """InputError naming ``option`` unless low < value <= high (low <= value if not
    low_open); NaN is refused, as is infinity."""
    above = value > low if low_open else value >= low
    if not (math.isfinite(value) and above and value <= high):
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        limit = "" if math.isinf(high) else f" and <= {high:g}"
        raise InputError(option, f"must be {bound}{limit}, not {value}")


def _check_output(output: Path) -> None:
    """InputError naming --output where the model could not be written (before any work)."""
    parent = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise InputError("--output", f"{output} is a directory; name the .npz file")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise InputError("--output", f"cannot write in {parent}: it must be a writable folder")
    if output.exists() and not os.access(output, os.W_OK):
        raise InputError("--output", f"{output} is not writable")


def _queueing(names, saturation_rps, servers_per_site, service_mean_ms, slo_ms, residual_ms):
    """(model, how it was made) from the queueing formula (§4)."""
    from geoslo.control.kurma import queueing_model

    _check_number(servers_per_site, "--servers-per-site", 0, 1024)
    if saturation_rps is not None and service_mean_ms is not None:
        raise InputError(
            "--service-mean-ms", "give --saturation-rps or --service-mean-ms, not both "
            "(saturation = servers x 1000 / mean)",
        )  # fmt: skip
    if saturation_rps is not None:
        per_server = [rate / servers_per_site for rate in parse_rates(saturation_rps, len(names))]
    elif service_mean_ms is not None:
        _check_number(service_mean_ms, "--service-mean-ms", 0, 60_000)
        per_server = [1000.0 / service_mean_ms] * len(names)
    else:
        raise InputError(
            "--saturation-rps",
            "give the sites' saturation point (--saturation-rps or --service-mean-ms), "
            "or --profile HOST:PORT to measure it",
        )
    model = queueing_model(names, servers_per_site, per_server, slo_ms, residual_ms)
    return model, f"an M/M/1 queue per server, {servers_per_site} server(s) a site"


def _profiled(names, profile, max_rps, points, seconds_per_point, password_file, tls_ca_file,
              max_late_ms, slo_ms, residual_ms):  # fmt: skip
    """(model, how it was made) from a profile of the store at ``profile`` (§4.1)."""
    from geoslo.control.kurma import exponential_residual, profiled_model
    from geoslo.live.kurma import profile_store, store_profile_loads
    from geoslo.live.kurma._agent import read_password_file

    servers = parse_addresses(profile)
    _check_number(max_rps, "--max-rps", 0, 10_000_000)
    _check_number(points, "--points", 1, 64)
    _check_number(seconds_per_point, "--seconds-per-point", 0, 600)
    _check_number(max_late_ms, "--max-late-ms", 0, 60_000)
    password = (
        None if password_file is None else read_password_file(password_file, "--password-file")
    )
    tls = None if tls_ca_file is None else _tls_context(tls_ca_file)
    loads = store_profile_loads(max_rps, points)
    typer.echo(f"profiling {profile}: {points} loads up to {max_rps:g} req/s, "
               f"{seconds_per_point} s each, GETs only", err=True)  # fmt: skip
    measured = profile_store(
        servers, loads, seconds_per_point, slo_ms, max_late_ms, password, tls,
        lambda line: typer.echo(line, err=True),
    )  # fmt: skip
    residual = exponential_residual(residual_ms)
    model = profiled_model(names, measured.profile, measured.capacity_rps, slo_ms, residual)
    capacity = f"{measured.capacity_rps:.0f} req/s"
    how = (
        f"saturated at {capacity}"
        if measured.saturated
        else f"no median over the SLO up to {capacity}, taken as its capacity: a higher "
        "--max-rps finds the true one"
    )
    return model, f"a profile of {profile} ({how})"


def _tls_context(ca_file: Path) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as error:
        raise InputError("--tls-ca-file", f"cannot read a CA from {ca_file}: {error}") from None


def model_summary(model, output: Path, slo_ms: float, source: str) -> str:
    """One paragraph: the sites, each one's capacity and its local requests' violations at
    50% and 90% of it."""
    parts = []
    for site, capacity, surface in zip(
        model.sites, model.capacity_rps, model.surfaces, strict=True
    ):
        curve = surface.curve(0.0)
        parts.append(
            f"{site} {capacity:.0f} req/s ({float(curve(0.5 * capacity)):.2%} at 50%, "
            f"{float(curve(0.9 * capacity)):.2%} at 90%)"
        )
    if len({part.partition(" ")[2] for part in parts}) == 1:  # every site alike
        parts = [f"every site {parts[0].partition(' ')[2]}"]
    return (
        f"Wrote {output}: Kurma's model of {len(model.sites)} sites ({', '.join(model.sites)}) "
        f"from {source}. Capacity and local requests over the {slo_ms:g} ms SLO: "
        f"{'; '.join(parts)}. Copy it to every "
        "agent and name it in model_file (docs/live.md)."
    )
