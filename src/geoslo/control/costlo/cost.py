"""CosTLO's cost model (§5.2, §6.3): what a configuration costs per month for one prefix's
workload, as storage, requests, VMs and bandwidth.

* storage: every copy of the prefix's data, in each region at its price;
* requests: the first GET, the redundant set when issued; the synchronous PUTs, and one
  asynchronous PUT per remaining copy (§5.4);
* bandwidth: one object per direct response leaving a region, one per relayed message;
  propagating PUTs to the second region leaves the serving region;
* VMs: relay VMs sized by the relay rate each sustains (§5.2), and the share of the lock
  and version service (§5.4; a small VM holds 70M objects' state, §6.3).
"""

from __future__ import annotations

from dataclasses import dataclass

from geoslo.control.costlo.types import Configuration, CostBreakdown, PrefixWorkload

__all__ = ["CostModel", "HOURS_PER_MONTH", "BYTES_PER_GB"]

HOURS_PER_MONTH = 730.0
BYTES_PER_GB = 1e9


@dataclass(frozen=True)
class CostModel:
    """Prices of the serving and second region and the workload of one prefix."""

    workload: PrefixWorkload
    serving_prices: object  # StoragePrices
    second_prices: object | None = None
    serving_relay_rps: float = 1000.0
    second_relay_rps: float = 1000.0
    objects_per_lock_vm: float = 70e6  # §6.3: 70M objects' locks fit one small VM

    def monthly(
        self, c: Configuration, get_redundant_fraction: float, put_redundant_fraction: float
    ) -> CostBreakdown:
        """Expected cost per month; the fractions are the shares of operations that
        issue the redundant set (from the latency estimate and timeout)."""
        w, s, t = self.workload, self.serving_prices, self.second_prices
        second_copies = 0 if t is None else c.second.copies
        q = get_redundant_fraction
        gb_per_object = w.object_bytes / BYTES_PER_GB

        storage = w.stored_gb * s.storage_usd_per_gb_month * c.serving_copies
        if second_copies:
            storage += w.stored_gb * t.storage_usd_per_gb_month * second_copies

        # The first request goes to copy 0 (through the relay if relayed); the redundant
        # set adds the rest of the serving tuple: one more relayed message, or its requests.
        serving_extra = float(c.serving.requests - 1)
        requests = w.gets_per_month * s.usd_per_get * (1.0 + q * serving_extra)
        messages = 1.0 + q * (1.0 if serving_extra else 0.0)  # relayed messages per GET
        objects_out = messages if c.serving.relay_vm else 1.0 + q * serving_extra
        egress = w.gets_per_month * gb_per_object * s.egress_usd_per_gb * objects_out
        vms = 0.0
        if c.serving.relay_vm:
            vms += _relay_vms(w.peak_get_rps * messages, self.serving_relay_rps) * s.vm_usd_per_hour
        if second_copies:
            requests += w.gets_per_month * t.usd_per_get * q * c.second.requests
            egress += (
                w.gets_per_month
                * gb_per_object
                * t.egress_usd_per_gb
                * q
                * (1.0 if c.second.relay_vm else c.second.requests)
            )
            if c.second.relay_vm:
                vms += _relay_vms(w.peak_get_rps * q, self.second_relay_rps) * t.vm_usd_per_hour

        sync_puts = 1.0 + put_redundant_fraction * (c.put.requests - 1)
        # Copies the synchronous PUTs did not reach are written later, one PUT each (§5.4).
        unsynced_put_copies = (1.0 - put_redundant_fraction) * (c.put.copies - 1)
        async_local = c.serving_copies - c.put.copies + unsynced_put_copies
        requests += w.puts_per_month * s.usd_per_put * (sync_puts + async_local)
        if second_copies:
            requests += w.puts_per_month * t.usd_per_put * second_copies
            egress += w.puts_per_month * gb_per_object * s.egress_usd_per_gb * second_copies
        if _needs_lock_service(c):
            objects = w.stored_gb / gb_per_object if gb_per_object > 0 else 0.0
            vms += objects / self.objects_per_lock_vm * s.vm_usd_per_hour
        return CostBreakdown(storage, requests, vms * HOURS_PER_MONTH, egress)


def _relay_vms(rate_rps: float, relay_rps: float) -> float:
    """VMs needed to relay ``rate_rps`` without queueing (a fractional share of a pool)."""
    return rate_rps / relay_rps if relay_rps > 0 else 0.0


def _needs_lock_service(c: Configuration) -> bool:
    """Copies or redundant PUTs need §5.4's locks and versions."""
    return c.serving_copies > 1 or not c.second.unused or c.put_redundant
