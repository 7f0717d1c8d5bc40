"""A kind of collective of one dimension as the budget costs it (Item), and the bytes an element its messages carry."""

from __future__ import annotations

from dataclasses import dataclass


ACT_BYTES = 2  # BF16: P2P tensors, CP's keys and values, EP's tokens, TP's reduce-scatters and all-reduces


# TP all-gathers move what the GEMM reads: Transformer Engine quantizes the input (and the output gradient) first and
# gathers the quantized data (pytorch/distributed.py gather_along_first_dim; userbuffers' all-gather buffers likewise).
# FP8's scales are under 3 % of it (one per tensor, or per 32 values in MXFP8); NVFP4: 4 bits and an FP8 scale per 16.
GATHER_BYTES = {"bf16": 2, "fp8": 1, "fp4": 0.5625}


@dataclass
class Item:
    """A kind of collective of one dimension: one message's size, how many per iteration, the link, its time."""

    dimension: str
    collective: str
    what: str
    bytes: int
    count: int
    group: int
    link: str
    seconds: float  # all of them, per iteration
    hidden: float  # of that, hidden behind compute with the settings as given
    setting: str | None  # the overlap setting that hides it (None: always overlapped by design, or never)
    last: float = 0.0  # of `seconds`, the part no overlap can hide (the last gradient bucket: the backward has ended)
    last_bytes: int = 0  # that last bucket's message
    bytes_vary: bool = False  # the messages differ in size (DP's buckets): `bytes` is the largest
    first_chunk: bool = False  # `last` is model chunk 0's whole reduce or gather (the interleaved schedule's)
    local: int = 0  # across the network: the fewest of a group's ranks in one NVLink domain (0: inside one)
    gbps: float = 0.0  # across the network: the large-message bus bandwidth it is priced at (System.network_gbps)
    waits: float = 0.0  # of the exposed part, what fp32 accumulation's wait between bucket groups adds (dp.chained)

    def to_dict(self) -> dict:
        return {"dimension": self.dimension, "collective": self.collective, "what": self.what, "bytes": self.bytes,
                "count": self.count, "group": self.group, "link": self.link, "ms": ms(self.seconds),
                "hidden_ms": ms(self.hidden), "exposed_ms": ms(self.seconds - self.hidden), "setting": self.setting,
                **({"bytes_vary": True} if self.bytes_vary else {}),
                **({"waits_ms": ms(self.waits)} if self.waits else {}),
                **({"network_gbps": round(self.gbps, 1)} if self.link == "network" and self.gbps else {})}


def across(system, collective: str, link: str, local: int | None) -> dict:
    """An Item's network fields: for a collective across the network, the fewest of its group's ranks in one NVLink
    domain and the bus bandwidth that prices it (a ring's NICs aggregate over those ranks: System.network_gbps)."""
    if link != "network":
        return {}
    return {"local": local or 1, "gbps": system.network_gbps(collective, local)}


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)

