"""The machine a run depends on beyond its config: NVLink domain, torch's MPI support, multicast, Transformer Engine.

Each fact has a default that says where it came from (the GPU type's data, the Bridge venv's torch, the release's
pinned Transformer Engine) and a flag that overrides it; `Machine.to_dict()` shows both, so an agent sees what was
assumed. Nothing here imports torch: the torch build is read from its library's ELF header.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

from ..upstream import releases
from .. import safeio
from ..errors import UsageError
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Machine:
    gpu: str
    gpus_per_node: int
    nvlink_domain: int  # GPUs one NVLink domain joins (8 on an H100/B200/B300 node, 72 in a GB200/GB300 NVL72 rack)
    mnnvl: bool  # the domain spans nodes (multi-node NVLink)
    multicast: bool  # CUDA multicast (driver >= 12.1 on an NVSwitch system): userbuffers need it unless UB_SKIPMC=1
    te_version: str
    given_torch_mpi: bool | None = None  # torch.distributed has the MPI backend: as given, else read on first use
    release: releases.Release | None = field(default=None, compare=False, repr=False)
    sources: dict = field(default_factory=dict, compare=False)  # fact -> where its value came from

    @property
    def torch_mpi(self) -> bool:
        """Read (a few ms) only when a rule asks: the bootstrap backend check."""
        if self.given_torch_mpi is not None:
            return self.given_torch_mpi
        found, source = torch_has_mpi(self.release)
        self.sources["torch_mpi"] = source
        return found

    def to_dict(self) -> dict:
        facts = {k: getattr(self, k) for k in ("gpu", "gpus_per_node", "nvlink_domain", "mnnvl", "multicast", "te_version")}
        read = "torch_mpi" in self.sources
        return {**facts, "torch_mpi": self.torch_mpi if read else None, "assumed": {
            **self.sources, **({} if read else {"torch_mpi": "not read: no rule needed it (only the mpi bootstrap backend does)"})}}


def describe(gpu: str, release: releases.Release, *, nvlink_domain: int | None = None, gpus_per_node: int | None = None,
             multicast: bool | None = None, torch_mpi: bool | None = None, te_version: str | None = None) -> Machine:
    """The machine for a GPU type, each fact from its flag where given, else its default (and the default's source)."""
    info = releases.gpu(gpu)
    sources = {}

    def pick(name, value, default, source):
        if value is not None:
            sources[name] = "given"
            return value
        sources[name] = source
        return default

    topology = f"{info['name']} (Bridge's perf scripts: NUM_GPUS_PER_NODE_MAP, NVLINK_DOMAIN_SIZE, USE_MNNVL)"
    per_node = _positive("--gpus-per-node", pick("gpus_per_node", gpus_per_node, info["gpus_per_node"], topology))
    own_domain = info["nvlink_domain"]
    if not info["mnnvl"] and per_node < own_domain:  # the type's domain is its node (USE_MNNVL 0): fewer GPUs per node
        own_domain, topology = per_node, (f"the node: a {info['name']} node's NVLink does not span nodes (USE_MNNVL 0 in "
                                          f"Bridge's perf scripts), so its domain is the {per_node} GPUs per node given")
    domain = _positive("--nvlink-domain", pick("nvlink_domain", nvlink_domain, own_domain, topology))
    mnnvl = domain > per_node
    sources["mnnvl"] = "nvlink_domain > gpus_per_node"
    if torch_mpi is not None:
        sources["torch_mpi"] = "given"
    return Machine(
        gpu=info["name"], gpus_per_node=per_node, nvlink_domain=domain, mnnvl=mnnvl,
        multicast=pick("multicast", multicast, True, "the pinned CUDA 13 stack needs a driver >= 580, which has CUDA multicast "
                                                     "on NVSwitch systems"),
        te_version=pick("te_version", _te_version(te_version), release.transformer_engine, _te_source(release)),
        given_torch_mpi=torch_mpi, release=release, sources=sources,
    )


def _te_source(release) -> str:
    """Where the assumed Transformer Engine comes from (evalM M7: 0.5.x and 0.6.0 were said to pin our venv's)."""
    if release.transformer_engine_lock and release.transformer_engine_lock != release.transformer_engine:
        return (f"the Transformer Engine the skill verified Megatron-Bridge {release.version} with; the release's uv.lock "
                f"pins {release.transformer_engine_lock} (--te-version for yours)")
    return f"pinned for Megatron-Bridge {release.version}"


def _positive(flag: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{flag}: must be a positive integer, got {value!r}")
    return value


# --- torch's MPI backend, read without importing torch -------------------------------------------------------------

MAX_LIBRARY_BYTES = 8 << 30  # libtorch_cpu.so is about 500 MB; only its ELF header and dynamic section are read
_DEFAULT_MPI = (False, "PyPI's torch wheels are built without MPI (no torch found to read)")


def torch_has_mpi(release: releases.Release) -> tuple[bool, str]:
    """(whether torch links an MPI library, where that was read): the torch this Python imports, else the Bridge venv's
    (scripts/bridge_env.sh), else PyPI's default (built without MPI)."""
    for lib in _torch_libraries(release):
        needed = elf_needed(lib)
        if needed is not None:
            mpi = any(n.startswith("libmpi") for n in needed)
            return mpi, f"{lib} {'links' if mpi else 'does not link'} an MPI library"
    return _DEFAULT_MPI


def _torch_libraries(release: releases.Release):
    from importlib.util import find_spec

    try:
        spec = find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        yield Path(spec.origin).parent / "lib" / "libtorch_cpu.so"
    venv = os.environ.get("MBRIDGE_VENV") or os.path.join(safeio.cache_home(), "nemo-mbridge-perf-tp-dp-comm-overlap",
                                                          f"venv-mbridge-{release.data_version}")
    for site in sorted(Path(venv).glob("lib/python3*/site-packages")):
        yield site / "torch" / "lib" / "libtorch_cpu.so"


def elf_needed(path: Path) -> list[str] | None:
    """The DT_NEEDED entries of a 64-bit little-endian ELF shared library; None where it is not one, or not a regular
    file (a FIFO would block the open: fuzzH H3), or unreadable."""
    try:
        fd = safeio.open_input(path, MAX_LIBRARY_BYTES)
    except UsageError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            head = fh.read(64)
            if head[:6] != b"\x7fELF\x02\x01":
                return None
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
            segments = [struct.unpack_from("<IIQQQQ", table, i * phentsize) for i in range(phnum)]
            dynamic = next(((off, size) for kind, _f, off, _va, _pa, size in segments if kind == 2), None)
            if dynamic is None:
                return []
            fh.seek(dynamic[0])
            entries = [struct.unpack_from("<qQ", chunk) for chunk in _chunks(fh.read(dynamic[1]), 16)]
            strtab = next((v for tag, v in entries if tag == 5), None)
            offset = next((strtab - va + off for kind, _f, off, va, _pa, size in segments
                           if kind == 1 and va <= (strtab or -1) < va + size), None)
            if offset is None:
                return None
            names = []
            for tag, value in entries:
                if tag == 1:
                    fh.seek(offset + value)
                    names.append(fh.read(256).split(b"\0", 1)[0].decode("ascii", "replace"))
            return names
    except (OSError, struct.error):
        return None


def _chunks(data: bytes, size: int):
    return (data[i:i + size] for i in range(0, len(data) - size + 1, size))


# A Transformer Engine version as its packages spell it: 2.20.2, 2.9.0.dev0, 1.9.0.post1, 2.4.0+c1bbe6a
_TE_VERSION = re.compile(r"(?:0|[1-9][0-9]{0,3})(?:\.(?:0|[1-9][0-9]{0,3})){1,2}(?:[.+-]?[A-Za-z0-9][A-Za-z0-9.+-]{0,39})?")


def _te_version(value: str | None) -> str | None:
    if value is not None and not (isinstance(value, str) and _TE_VERSION.fullmatch(value)):
        raise UsageError(f"--te-version: expected a Transformer Engine version such as 2.20.2, got {safeio.shown(str(value))}")
    return value
