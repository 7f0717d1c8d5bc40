"""evalAA AA-4: a watchdog timeout that follows another cause's error on other ranks of the same log waits on the
ranks that failed: it is said to follow that cause (info) and its own fixes (a longer timeout, an overlap turned off)
are not offered; alone, or before the other failure, it keeps them."""

from mbridge_overlap import api

DEEPEP = ["[rank2]: DeepEP timeout check failed: rank = 2, thread = 0, value = 0)",
          "[rank6]: DeepEP timeout check failed: rank = 6, thread = 0, value = 0)",
          "[rank6]: RuntimeError: DeepEP error: timeout (dispatch CPU)"]
WATCHDOG = ("[rank0]:[E1130 10:12:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=48211, OpType=_REDUCE_SCATTER_BASE, NumelIn=402653184, NumelOut=100663296, "
            "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.")


def _causes(tmp_path, lines):
    log = tmp_path / "hang.log"
    log.write_text("\n".join(lines) + "\n")
    return {c["id"]: c for c in api.diagnose([str(log)]).to_dict()["causes"]}


def test_a_timeout_after_another_ranks_failure_follows_it(tmp_path):
    causes = _causes(tmp_path, DEEPEP + [WATCHDOG])
    assert causes["MOE_DISPATCHER_COMM_FAILED"]["severity"] == "error"
    dp = causes["DP_COLLECTIVE_TIMEOUT"]
    assert dp["severity"] == "info" and dp["fix_overrides"] == {}
    assert "it follows MOE_DISPATCHER_COMM_FAILED" in dp["message"] and "ranks 2, 6" in dp["message"]
    assert dp["fix"].startswith("the fix of MOE_DISPATCHER_COMM_FAILED") and "distributed_timeout_minutes" not in dp["fix"]


def test_a_timeout_alone_or_first_keeps_its_own_fixes(tmp_path):
    for lines in ([WATCHDOG], [WATCHDOG] + DEEPEP):
        dp = _causes(tmp_path, lines)["DP_COLLECTIVE_TIMEOUT"]
        assert dp["severity"] == "error" and "distributed_timeout_minutes" in dp["fix"]


ITERATION = (" [2026-11-30 10:30:00] iteration      {n}/    1000 | consumed samples:        {s} | elapsed time per "
             "iteration (ms): 5123.4 | learning rate: 1.0E-04 | global batch size:   256 | lm loss: 2.1E+00 |")


def test_a_timeout_after_the_run_trained_again_is_its_own_cause(tmp_path):
    """recheck62 AI3: torchrun restarted the workers after DeepEP's failure; iterations ran again in the same log, then
    a DP watchdog timed out: that timeout is a failure of the new attempt, with its own fixes."""
    again = [ITERATION.format(n=n, s=256 * n) for n in (1, 2)]
    dp = _causes(tmp_path, DEEPEP + again + [WATCHDOG])["DP_COLLECTIVE_TIMEOUT"]
    assert dp["severity"] == "error" and "distributed_timeout_minutes" in dp["fix"]
    dp = _causes(tmp_path, again + DEEPEP + [WATCHDOG])["DP_COLLECTIVE_TIMEOUT"]  # trained before, then failed: follows
    assert dp["severity"] == "info"
