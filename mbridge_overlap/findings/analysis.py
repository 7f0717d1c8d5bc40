"""One analysis of a scenario: the resolver's state after runtime_config_update() and every check's findings.

Every verb is a view of this: resolve prints it, lint adds only what needs a saved run config (saved versus computed),
plan analyses the scenario its overrides make, diff compares two, recipes and diagnose read theirs. Re-resolution
for fix proofs goes through `state_of` too, so a fix is proven on the same path as the answer it belongs to.
"""

from __future__ import annotations


from . import rules as checks  # noqa: F401 (importing it registers the checks that proof.collect runs)
from .. import findings
from ..run import launch_env, layout, resolver
from ..contract import SCHEMA_VERSION
from . import proof
from .proof import collect
from dataclasses import dataclass, field
from ..run.scenario import Scenario


def state_of(scenario: Scenario) -> resolver.State:
    """The resolver's state of a scenario (Scenario.resolve: the one path, fix proofs included)."""
    return scenario.resolve()


def analyze(scenario: Scenario) -> "Analysis":
    state = state_of(scenario)
    with findings.written_for(state.request):
        return Analysis(scenario, state, findings.sort(collect(state)))


@dataclass
class Analysis:
    scenario: Scenario
    state: resolver.State
    findings: list = field(default_factory=list)
    budget: dict | None = None  # budget.shown(): set where a verb was asked for it (resolve, plan)

    @property
    def errors(self) -> list:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def effective(self) -> dict:
        return self.state.effective()

    @property
    def data_parallel_size(self) -> int | None:
        return self.state.data_parallel_size or None  # None: GPUs not a multiple of TP x PP x CP

    @property
    def launch_layout(self) -> launch_env.Layout:
        return launch_env.layout_of(self.state)

    @property
    def bridge_version(self) -> str:
        return self.scenario.release.version

    @property
    def gpus(self) -> int:
        return self.scenario.gpus

    @property
    def gpu(self) -> str:
        return self.scenario.gpu

    @property
    def recipe(self) -> str | None:
        return self.scenario.recipe["name"] if self.scenario.recipe else None

    @property
    def env_vars(self) -> dict:
        """What the config's env_vars set (installed with setdefault: the launcher's values win), as strings."""
        return {k: str(v) for k, v in self.state.request.env_vars.items()}

    @property
    def launch_env(self) -> dict:
        """What Bridge's own launchers set for this layout: {name: {value, why}}."""
        out = {name: {"value": value, "why": why} for name, value, why in launch_env.rules(self.scenario.release, self.launch_layout)}
        req = self.state.request
        for name in set(out) & set(launch_env.TOPOLOGY):  # (recheck55 AB8: the 0.6 perf launcher keeps an explicit one)
            if req.origin.get(f"env_vars.{name}") == "override":
                out[name] = {"value": str(req.env_vars[name]), "why": f"your env_vars override, which the 0.6 perf launcher "
                             f"keeps (its protected names; its own rule: {out[name]['value']})"}
        return out

    def modes(self) -> dict:
        return modes(self.effective, layout.Layout.of(self.state.model, self.scenario.gpus), self.scenario.te, self.findings,
                     self.state.ddp.get("data_parallel_sharding_strategy") if self.state.fsdp else None)

    def batch(self) -> dict:
        """The global batch, the micro-batch, and the micro-batches each data-parallel rank runs per iteration (what
        changes when DP does); a count is null where the sizes are not known or do not divide."""
        train, dp = self.state.train, self.data_parallel_size
        gbs, mbs = train.get("global_batch_size"), train.get("micro_batch_size")
        micro = gbs // (mbs * dp) if gbs and mbs and dp and gbs % (mbs * dp) == 0 else None
        return {"global_batch_size": gbs, "micro_batch_size": mbs, "micro_batches_per_iteration": micro}

    def requested(self) -> dict:
        """The request's comm_overlap section (None: there is none; a field's None: Bridge picks), and who set each
        field: the recipe, the run config or an override."""
        req = self.state.request
        comm = req.comm_overlap
        set_by = {k: req.origin[k] for k in req.origin if k.startswith("comm_overlap.") and comm is not None
                  and comm.get(k.partition(".")[2]) is not None}
        if "comm_overlap" in req.origin:
            set_by["comm_overlap"] = req.origin["comm_overlap"]
        return {"comm_overlap": None if comm is None else dict(comm), "set_by": set_by}

    def all_fixes(self) -> dict | None:
        """Every fix of this answer at once (proof.coherent holds them together), the findings the config so fixed
        has that this one has not (no warning or error, but an info finding can come: a preset tuned for another
        layout, an overlap left off as the fix of an overwritten request asks), and this answer's warnings and errors
        that still stand (no config change fixes them, or their fix waits on the others': resolve again)."""
        union: dict = {}
        remove: list = []
        for f in self.findings:
            union.update(f.fix_overrides)
            remove += [k for k in f.remove_keys if k not in remove]
        if not union and not remove:
            return None
        after = proof.rerun(self.state, union, remove)
        had = {proof.signature(f) for f in proof.probe(self.state)}
        then: dict = {}
        for f in [] if after is None else findings.sort(proof.probe(after)):
            if proof.signature(f) not in had:
                then.setdefault(f.id, f.severity)
        left = set() if after is None else {proof.aim(f) for f in proof.probe(after)}
        still = dict.fromkeys(f.id for f in self.findings if f.severity in proof.BLOCKING and proof.aim(f) in left)
        with findings.written_for(self.state.request):  # the words as this config's command line takes them, the
            # findings' own rule (evalAF AF-6: the bare model.seq_length=8192 for a file-built model beside its ++ fix)
            words = [str(findings.overrides_text(union))] if union else []
        return {"overrides": union, "remove": remove, "fix": " ".join(words + [f"~{k}" for k in remove]),
                "then": None if after is None else [{"id": k, "severity": v} for k, v in then.items()],
                "still": list(still)}

    def to_dict(self) -> dict:
        sc = self.scenario
        return {
            "schema_version": SCHEMA_VERSION,
            "bridge_version": sc.release.version,
            "verified": sc.release.verified,
            "recipe": sc.recipe["name"] if sc.recipe else None,
            "gpus": sc.gpus,
            "gpu": sc.gpu,
            "data_parallel_size": self.data_parallel_size,
            "batch": self.batch(),
            "effective": self.effective,
            "modes": self.modes(),
            "requested": self.requested(),
            "env_vars": self.env_vars,
            "launch_env": self.launch_env,
            "inputs": sc.to_dict(),
            "notes": list(sc.notes) + [n for n in [launch_env.executor_note(sc.release)] if n],
            "findings": [f.to_dict() for f in self.findings],
            "all_fixes": self.all_fixes(),
            **({"budget": self.budget} if self.budget is not None else {}),
        }


def modes(effective: dict, shape: layout.Layout, te: bool, found, sharding: str | None = None) -> dict:
    """layout.modes, and whether the run gets each mode: an error (Bridge rejects the config, or the run fails at
    setup or the first step) takes every mode away; a warning whose record says it `blocks` a mode (a steady-state
    serialisation) takes that one."""
    out = layout.modes(effective, shape, te, sharding)
    blocked: dict = {}
    model = effective["model"]
    whole = model["pipeline_model_parallel_size"] == 1 and (model["virtual_pipeline_model_parallel_size"] or 1) == 1
    mla: list = []
    for f in found:
        blocks = findings.record(f.id).get("blocks")
        if f.id == "TP_OVERLAP_OFF_MTP_DECODER":  # (no decoder layer of the MTP's model chunk gets userbuffers: with
            # PP = 1 that is the whole model; with PP > 1 the other ranks keep theirs, and the mode is said so)
            if whole:
                blocked.setdefault("tp", []).append(f)
            elif out["tp"]["configured"]:
                out["tp"]["why"] += (" on the ranks without the MTP block; the MTP's model chunk runs without "
                                     "userbuffers (TP_OVERLAP_OFF_MTP_DECODER)")
            continue
        if f.id == "TP_OVERLAP_OFF_MLA":  # (stop 56 left: the mode said on; tests/bridge/test_mla_tp_overlap.py builds it)
            mla.append(f)
            continue
        for mode in ("tp", "pp", "dp") if f.severity == "error" else [blocks] if blocks else []:
            blocked.setdefault(mode, []).append(f)
    for name, mode in out.items():
        against = blocked.get(name, [])
        for part in ("grad_reduce", "param_gather") if name == "dp" else ():
            stopped = against + blocked.get(f"dp.{part}", [])
            mode[part]["enabled"] = mode[part]["configured"] and not stopped
            if mode[part]["configured"] and stopped:
                mode[part]["why"] = f"configured, but {stopped[0].id}"
        if name == "dp":
            against = against or [f for part in ("grad_reduce", "param_gather") for f in blocked.get(f"dp.{part}", [])]
        mode["enabled"] = mode["configured"] and not against and not (name == "tp" and mla)
        if name == "tp" and mode["configured"] and mla and not against:
            mode["why"] = (f"configured on, but a multi-latent attention model ({mla[0].id}): Megatron-Core turns the "
                           "model's tp_comm_overlap off as it builds the first MLA layer's linear_q_down_proj (linear_q_proj "
                           "where q_lora_rank is null), so only that layer's linear_proj, built before it, keeps its "
                           "userbuffers reduce-scatter on each pipeline rank; every other TP all-gather and "
                           "reduce-scatter (q/kv projections, linear_proj of later layers, fc1, fc2, MTP) runs without")
        if mode["configured"] and against:
            f = against[0]
            mode["why"] = (f"configured on, but the run as a whole fails at {f.when or 'config'} ({f.id}) before it gets this overlap"
                           if f.severity == "error" else f"configured on, but {f.id}: {f.message}")
    return out
