"""scripts/verify.sh's engine: apply every snippet form to real Bridge, check the anchors, run the upstream
suites with a pass-count check, optionally the conformance set; one line per check, then the verdict.

Exit status: 0 when every check that ran passed and nothing required was left unrun; 1 when a check failed;
3 when nothing failed but a required check could not run (e.g. no checkout for the suites); 2 for bad input.

"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import re
import sys
import time
from pathlib import Path

from ..upstream import anchors, releases
from .. import api, safeio
from ..cli import options
from ..errors import UsageError
from . import adapter, apply, conformance, suites

DEFAULT_LAYOUT = dict(tp=4, pp=4, vpp=2, cp=1, ep=1, gpus=64, gpu="h100", precision="bf16")
SNIPPET_FILES = {"python": "python.py", "yaml": "overrides.yaml", "hydra": "hydra.txt", "env": "env.sh", "env_vars": "env_vars.py"}


# Where the time goes: with MBRIDGE_VERIFY_PHASES=FILE, verify writes there, as JSON, [time.time(), this process's
# CPU seconds] at the end of each phase (benchmarks/bench_verify.py reads it). Nothing else changes.
PHASES_ENV = "MBRIDGE_VERIFY_PHASES"
marks: dict = {}


def mark(phase: str) -> None:
    marks[phase] = [time.time(), time.process_time()]


def log(message: str) -> None:
    print(f"[verify] {safeio.esc(message)}", file=sys.stderr, flush=True)  # paths and texts of the user's (fuzzK K5)


def parser() -> argparse.ArgumentParser:
    p = options.Parser(prog="scripts/verify.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    lay = p.add_argument_group("layout (plan's flags; default: the recipe's with --recipe, else TP4, sequence parallel, "
                               "PP4, VPP2, 64 H100, bf16)")
    for flag in ("tp", "pp", "cp", "ep", "gpus"):
        lay.add_argument(f"--{flag}", type=options.positive_int)
    lay.add_argument("--vpp", type=options.count, help="0 for none")
    lay.add_argument("--gpu")
    lay.add_argument("--precision")
    for flag in ("hidden-size", "seq-length", "micro-batch-size"):
        lay.add_argument(f"--{flag}", type=options.positive_int)
    lay.add_argument("--lora", action="store_true")
    # plan's MoE and FSDP flags, so that every plan answer can be verified (evalS V4)
    lay.add_argument("--moe", action="store_true", default=None)
    lay.add_argument("--moe-a2a-overlap", action="store_true")
    lay.add_argument("--moe-flex-backend")
    lay.add_argument("--megatron-fsdp", action="store_true")
    lay.add_argument("--model", help="a known model's name, as plan takes it (an MoE model's expert count)")
    lay.add_argument("--no-te", dest="te", action="store_false")
    lay.add_argument("--recipe")
    lay.add_argument("--task", default="pretrain")
    lay.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="plan's own KEY=VALUE overrides beside the flags")
    p.add_argument("--mbridge-src", metavar="PATH", help="Megatron-Bridge checkout for the upstream suites (or MBRIDGE_SRC)")
    p.add_argument("--expect-passed", action="append", default=[], metavar="[SUITE=]N",
                   help="expected passed count; bare N is for test_comm_overlap.py")
    p.add_argument("--skip-suites", action="store_true", help="do not run the upstream suites (reported SKIPPED)")
    p.add_argument("--snippets", metavar="DIR",
                   help="apply the snippet files in DIR (python.py, overrides.yaml, hydra.txt, env.sh, env_vars.py) instead of fresh ones")
    p.add_argument("--save-snippets", metavar="DIR", help="write the rendered snippets to DIR")
    p.add_argument("--force", action="store_true", help="overwrite files in --save-snippets DIR")
    p.add_argument("--conformance", action="store_true", help="also check the resolver on the generated conformance set")
    p.add_argument("--cases", type=options.positive_int, default=2000, help="conformance cases (default 2000)")
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    return p


def layout_of(args) -> dict:
    """plan's layout from the flags: with --recipe what is not given is the recipe's, else DEFAULT_LAYOUT's."""
    for flag in ("model", "recipe", "precision"):  # an empty text is a mistake, as plan says (fuzzP P4: --model '')
        releases.given(f"--{flag}", getattr(args, flag))
    given = {k: getattr(args, k) for k in DEFAULT_LAYOUT}
    if not args.recipe:
        given = {k: DEFAULT_LAYOUT[k] if v is None else v for k, v in given.items()}
    if given["vpp"] == 0:
        given["vpp"] = None
    return dict(given, hidden_size=args.hidden_size, seq_length=args.seq_length, micro_batch_size=args.micro_batch_size,
                lora=args.lora, te=args.te, recipe=args.recipe, task=args.task, moe=args.moe,
                moe_a2a_overlap=args.moe_a2a_overlap, moe_flex_dispatcher_backend=args.moe_flex_backend,
                megatron_fsdp=args.megatron_fsdp, model=args.model, overrides=options.overrides_of(args.overrides))


def expectations(values: list[str]) -> dict:
    out = {}
    for value in values:
        name, _, count = value.rpartition("=")
        if not re.fullmatch(r"[0-9]{1,9}", count) or int(count) < 1:  # ASCII digits: isdigit() takes "²" (fuzzH H5)
            raise UsageError(f"--expect-passed {safeio.shown(value)}: expected N or SUITE=N with N >= 1")
        out[name or "test_comm_overlap.py"] = int(count)
    unknown = set(out) - set(suites.table()["suites"])
    if unknown:
        raise UsageError(f"--expect-passed: unknown suite {', '.join(sorted(unknown))}; known: {', '.join(suites.table()['suites'])}")
    return out


def load_snippets(directory: str | None, rendered: dict) -> dict:
    if not directory:
        return rendered
    folder = snippets_folder(directory)
    out = dict(rendered)
    for form, name in SNIPPET_FILES.items():
        path = folder / name
        if path.is_file() and form in rendered:
            try:
                out[form] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"--snippets {safeio.esc(str(path))}: not a readable UTF-8 text "
                                 f"({safeio.reason(exc) if isinstance(exc, OSError) else 'not UTF-8'})") from None
            log(f"using {path} for the {form} form")
    return out


def snippets_folder(directory: str) -> Path:
    """--snippets DIR, refused before Bridge is imported where it is no folder."""
    folder = Path(directory)
    if not folder.is_dir():
        raise UsageError(f"--snippets {safeio.esc(str(folder))}: no such folder")
    return folder


def save_snippets(directory: str, texts: dict, force: bool) -> None:
    """Each snippet written as --output writes a file (never through a symlink, never into a FIFO, nothing replaced
    without --force), every target checked before the first is written (fuzzH H6)."""
    folder = Path(directory)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--save-snippets {safeio.esc(str(folder))}: {safeio.reason(exc)}") from None
    paths = {form: folder / SNIPPET_FILES[form] for form in texts}
    check_save_targets(paths.values(), force)
    try:
        for form, text in texts.items():
            safeio.write_output(paths[form], text, force)
    except UsageError as exc:
        raise UsageError(str(exc).replace("--output", "--save-snippets", 1)) from None
    log(f"wrote {len(texts)} snippets to {folder}")


def check_save_targets(paths, force: bool) -> None:
    """Every snippet file --save-snippets would write: refused where it exists without --force, is a FIFO or a link
    to one (fuzzH H6); checked again before the 15 s import of Bridge, where the folder exists (fuzzL L5)."""
    try:
        for path in paths:
            safeio._check_target(path, force)
    except UsageError as exc:
        raise UsageError(str(exc).replace("--output", "--save-snippets", 1)) from None


def check(name: str, status: str, detail: str = "", **extra) -> dict:
    return {"check": name, "status": status, "detail": detail, **extra}


def run(args) -> dict:
    started = time.time()
    return _run_with_bridge(args, *prepare(args), started)


def prepare(args) -> tuple:
    """Everything verify checks of its arguments before Bridge is imported: (layout, expectations, plan, checkout).
    scripts/verify.sh runs it (--check-args) before it builds or picks an interpreter (fuzzR R6)."""
    layout = layout_of(args)
    given = expectations(args.expect_passed)
    plan = api.plan(**layout)  # bad layouts fail here, before Bridge is imported
    if plan.errors:
        raise UsageError(f"this layout cannot run, so there is nothing to verify: {plan.errors[0].message}")
    checkout = None if args.skip_suites else suites.find_checkout(args.mbridge_src)
    if args.snippets:
        snippets_folder(args.snippets)  # (not after the 15 s import)
    if args.save_snippets and Path(args.save_snippets).is_dir():
        check_save_targets((Path(args.save_snippets) / name for name in SNIPPET_FILES.values()), args.force)
    mark("plan")
    return layout, given, plan, checkout


def _run_with_bridge(args, layout, given, plan, checkout, started) -> dict:
    log("importing megatron.bridge (about 15 s)")
    adapter.quiet()
    import_bridge_once()
    mark("import")
    version = adapter.bridge_version()
    checks = [check("megatron-bridge imports", "PASS", f"megatron-bridge {version} in {sys.executable}")]
    if plan.resolution.bridge_version != version:
        plan = api.plan(**layout, bridge_version=version)

    # the suites run in a pytest process of their own (a fork of this one: Bridge is imported once) while the
    # snippets are checked here
    pending = None if args.skip_suites else suites.start(sys.executable, checkout, version, given, log)
    try:
        rendered = apply.snippets(plan)
        if args.save_snippets:
            save_snippets(args.save_snippets, rendered, args.force)
        for r in apply.check_forms(plan, load_snippets(args.snippets, rendered), log):
            same = "the exported variables are the plan's" if r.form.startswith("env ") else "every effective field matches the prediction"
            detail = r.error or (same if r.ok else _diff_text(r.differences))
            checks.append(check(f"apply {r.form}", "PASS" if r.ok else "FAIL", detail, differences=r.differences))
        mark("apply")

        report = anchors.report(None)
        missing = [f"{a['id']} ({a['status']})" for a in report["anchors"] if a["status"] in ("missing", "changed")]
        found = sum(a["status"] == "same" for a in report["anchors"])
        detail = (f"not as verified: {', '.join(missing)}" if missing
                  else f"{found} code anchors found, each the code of a verified release, in {report['package']}")
        checks.append(check("anchors", "FAIL" if missing else "PASS", detail))
        mark("anchors")

        if args.conformance:
            log(f"conformance: {args.cases} generated configs")
            conf = conformance.run(args.cases, progress=log)
            ok = conf["agree"] == conf["cases"]
            checks.append(check(f"conformance ({conf['cases']} configs)", "PASS" if ok else "FAIL",
                                f"{conf['agree']}/{conf['cases']} agree in {conf['seconds']} s", failures=conf["failures"][:20]))
            mark("conformance")

        if args.skip_suites:
            checks += [check(f"suite {n}", "SKIPPED", "--skip-suites") for n in suites.table()["suites"]]
        else:
            checks += [check(f"suite {r.name}", r.status, r.reason, counts=r.counts) for r in pending.results()]
            marks.update({f"suites_{k}": v for k, v in pending.timing.items()})
        mark("suites")
    finally:
        if pending is not None:
            pending.cancel()  # verify stopped early (bad --save-snippets folder, interrupted): no pytest left running
    return verdict(checks, plan, version, started)


# The Bridge modules the snippet step imports on first use (the yaml and hydra forms, the recipe baseline); the
# upstream suites import them too, so importing them before the fork saves that time in the suites' process.
APPLY_MODULES = ("megatron.bridge.training.utils.omegaconf_utils", "megatron.bridge.recipes.common")


def import_bridge_once():
    """adapter.import_bridge() and APPLY_MODULES with the cyclic garbage collector paused (the import makes some
    750,000 objects and has nothing for it to free: 8.3 s against 10.6 s here), then those objects frozen out of
    later collections (the exit of a process holding them unfrozen takes 2.5 s), which also keeps the suites'
    forked pytest from copying the memory pages they are on."""
    if "megatron.bridge" in sys.modules:
        return adapter.import_bridge()
    enabled = gc.isenabled()
    gc.disable()
    try:
        modules = adapter.import_bridge()
        for name in APPLY_MODULES:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001  (the snippet step reports it, where it always has)
                pass
    finally:
        if enabled:
            gc.enable()
    gc.freeze()
    return modules


def _diff_text(differences) -> str:
    return "; ".join(f"{field}: predicted {want!r}, Bridge {got!r}" for field, want, got in differences)


def verdict(checks: list, plan, version: str, started: float) -> dict:
    statuses = {c["status"] for c in checks}
    required_unrun = [c for c in checks if c["status"] == suites.NOT_RUN]
    if "FAIL" in statuses:
        result, code = "FAIL", 1
    elif required_unrun:
        result, code = "INCOMPLETE", 3
    else:
        result, code = "PASS", 0
    from ..contract import SCHEMA_VERSION

    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": result,
        "exit_code": code,
        "bridge_version": version,
        "layout": plan.layout,
        "checks": checks,
        "seconds": round(time.time() - started, 1),
    }


def human(report: dict) -> str:
    lay = report["layout"]
    lines = [
        f"verify: Megatron-Bridge {report['bridge_version']}, TP={lay['tp']} PP={lay['pp']} VPP={lay['vpp']} CP={lay['cp']} "
        + (f"EP={lay['ep']} " if lay.get("ep", 1) > 1 else "") + f"on {lay['gpus']} {lay['gpu']} ({lay['precision']})"
    ]
    for c in report["checks"]:
        lines.append(f"{c['status']:<8} {c['check']}: {safeio.esc(str(c['detail']))}")  # a snippet's exception text
    lines.append(f"verdict: {report['verdict']} ({report['seconds']} s)")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def stdout_to_stderr():
    """Bridge logs to stdout at import (handlers hold the stream), so move file descriptor 1 while it runs."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(argv=None) -> int:
    mark("main")
    argv = sys.argv[1:] if argv is None else list(argv)
    checking = argv[:1] == ["--check-args"]  # scripts/verify.sh: refuse bad arguments before any Bridge is built
    args = parser().parse_args(argv[1:] if checking else argv)
    if checking:
        try:
            prepare(args)
        except UsageError as exc:
            print(f"verify: error: {safeio.message(exc)}", file=sys.stderr)
            return 2
        return 0
    try:
        with stdout_to_stderr():
            report = run(args)
    except (UsageError, adapter.BridgeUnavailable) as exc:
        print(f"verify: error: {safeio.message(exc)}", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n" if args.json else human(report))
    sys.stdout.flush()
    mark("report")
    if os.environ.get(PHASES_ENV):
        Path(os.environ[PHASES_ENV]).write_text(json.dumps(marks), encoding="utf-8")
    return report["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
