"""Chapter 03's measurement helpers that need no engine: sizes, pauses, evictions seen in gauges, the simulator."""

from __future__ import annotations

import pandas as pd
import pytest

from servelab.measure.paging import pressure as kp


def test_output_lengths_spread_evenly_and_need_overfill_times_the_budget() -> None:
    outs = kp.pressure_output_tokens(4096, 12, 342, 1.5)
    assert len(outs) == 12 and outs == sorted(outs) and len(set(outs)) == 12
    assert outs[0] == round(0.5 * (6144 / 12 - 342)) and outs[-1] == round(1.5 * (6144 / 12 - 342))
    assert abs(sum(12 * [342]) + sum(outs) - 1.5 * 4096) <= 12
    assert kp.pressure_output_tokens(4096, 4, 100, 2.0, spread=0.0) == [1948] * 4
    with pytest.raises(ValueError, match="overfill must be > 1"):
        kp.pressure_output_tokens(4096, 12, 341, 1.0)
    with pytest.raises(ValueError, match="spread must be in"):
        kp.pressure_output_tokens(4096, 12, 341, 1.5, spread=1.0)
    with pytest.raises(ValueError, match="answers under 2 tokens"):
        kp.pressure_output_tokens(1000, 12, 341, 1.5)


def test_reservation_fit_counts_whole_slabs_first_come_first_served() -> None:
    assert kp.reservation_fit(4096, 2048, [512] * 12) == {"max_len": 2, "exact": 8}
    assert kp.reservation_fit(4095, 2048, [512] * 12) == {"max_len": 1, "exact": 7}
    assert kp.reservation_fit(1000, 100, [600, 100, 300, 50]) == {"max_len": 4, "exact": 3}  # stops at the first misfit


def _tokens(streams: dict[int, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"req": r, "t_s": t} for r, ts in streams.items() for t in ts])


def test_a_request_that_misses_steps_others_ran_has_a_pause() -> None:
    steps = [0.1 * k for k in range(1, 21)]
    streams = {0: steps, 1: steps[:5] + steps[12:]}  # request 1 sat out steps 6..12
    found = kp.pauses(_tokens(streams))
    assert found.to_dict("records") == [{"req": 1, "start_s": steps[4], "end_s": steps[12]}]


def test_a_gap_of_a_few_steps_is_jitter_not_a_pause() -> None:
    steps = [0.1 * k for k in range(1, 21)]
    streams = {0: steps, 1: steps[:5] + steps[9:]}  # request 1 missed steps 6..9: four steps, a scheduling hiccup
    assert kp.pauses(_tokens(streams)).empty
    assert len(kp.pauses(_tokens(streams), min_missed=3)) == 1  # the old, looser threshold took it for a pause


def test_a_burst_of_buffered_tokens_is_not_a_pause() -> None:
    steps = [round(0.2 * k, 3) for k in range(1, 31)]
    burst = steps[:10] + [2.05, 2.06, 2.07] + steps[10:]  # another stream delivers three tokens at once
    assert kp.pauses(_tokens({0: burst, 1: steps})).empty  # stream 1 missed no step: its gap is one step long


def test_slow_steps_for_everyone_are_not_pauses() -> None:
    times = [0.1, 0.2, 2.0, 2.1, 2.2]  # one long step (a prefill) delays every request alike
    assert kp.pauses(_tokens({0: times, 1: [t + 0.01 for t in times]})).empty


def test_gauge_evictions_are_running_to_waiting_moves() -> None:
    timeline = pd.DataFrame({"t_s": [0, 1, 2, 3, 4], "running": [0, 10, 7, 9, 9], "waiting": [12, 2, 5, 3, 4]})
    moves = kp.gauge_evictions(timeline)
    assert moves.to_dict("records") == [{"t_s": 2, "moved": 3}]


def test_busy_mean_weights_samples_by_time_and_skips_idle_ones() -> None:
    timeline = pd.DataFrame({"t_s": [0.0, 1.0, 4.0, 5.0, 6.0], "running": [0, 2, 6, 0, 0], "waiting": [0, 0, 0, 0, 0]})
    assert kp.busy_mean_running(timeline) == pytest.approx((2 * 3 + 6 * 1) / 4)
    with pytest.raises(ValueError, match="no busy sample"):
        kp.busy_mean_running(timeline.assign(running=0))


def test_simulated_pressure_preempts_only_when_the_blocks_run_out() -> None:
    tight = kp.simulated_pressure([341] * 12, [171] * 12, block_size=128, blocks=31, max_len=2048)
    roomy = kp.simulated_pressure([341] * 12, [171] * 12, block_size=128, blocks=48, max_len=2048)
    assert tight["preemptions"] > 0 and tight["max_batch"] < 12
    assert roomy == {"mean_batch": 12.0, "max_batch": 12, "preemptions": 0}


def test_simulated_pressure_stores_all_but_the_last_token_like_an_engine() -> None:
    # 12 requests of 512 tokens: the engine stores 511 of each, 4 blocks of 128, 48 in all
    assert kp.simulated_pressure([341] * 12, [171] * 12, block_size=128, blocks=48, max_len=2048)["preemptions"] == 0
    assert kp.simulated_pressure([341] * 12, [171] * 12, block_size=128, blocks=47, max_len=2048)["preemptions"] > 0
    with pytest.raises(ValueError, match="every output must be >= 2"):
        kp.simulated_pressure([10], [1], block_size=16, blocks=200, max_len=2048)


class _FakeServer:
    engine, port = "vllm", 1

    def __init__(self, argv: list[str]) -> None:
        self.spec = type("Spec", (), {"argv": argv})()


def test_budget_bytes_reads_the_launch_flag() -> None:
    assert kp.budget_bytes(_FakeServer(["vllm", "serve", "--kv-cache-memory-bytes", "1234"])) == 1234
    with pytest.raises(ValueError, match="no --kv-cache-memory-bytes"):
        kp.budget_bytes(_FakeServer(["vllm", "serve"]))


def test_peak_blocks_counts_only_requests_still_running() -> None:
    # two requests of 4-token prompts, blocks of 4: the short one leaves before the long one grows
    assert kp.peak_blocks([4, 4], [2, 10], 4) == 4  # k=2: 2 + 2 blocks; later only the long one, up to 4 blocks
    assert kp.peak_blocks([341] * 12, [171] * 12, 128) == 48


def test_peak_blocks_is_the_smallest_pool_the_simulator_never_preempts_in() -> None:
    prompts, outputs = [342] * 12, kp.pressure_output_tokens(4096, 12, 342, 1.5)
    peak = kp.peak_blocks(prompts, outputs, 128)
    assert kp.simulated_pressure(prompts, outputs, block_size=128, blocks=peak, max_len=2048)["preemptions"] == 0
    assert kp.simulated_pressure(prompts, outputs, block_size=128, blocks=peak - 1, max_len=2048)["preemptions"] > 0


def test_waves_must_be_one_non_negative_integer_per_prompt() -> None:
    class _Engine:  # refused before anything is sent, so no server is needed
        engine, url = "sglang", "http://127.0.0.1:9"

    for waves in ([0], [0, -1], [0, 1.0]):
        with pytest.raises(ValueError, match="waves must be one integer >= 0 per prompt"):
            kp.run_pressure(_Engine(), ["a", "b"], [4, 4], waves=waves)


def _run(timeline: list[tuple[float, int, int]], sent: list[float], finish: list[float]) -> kp.PressureRun:
    tl = pd.DataFrame(timeline, columns=["t_s", "running", "waiting"])
    req = pd.DataFrame({"req": range(len(sent)), "sent_s": sent, "finish_s": finish})
    return kp.PressureRun("vllm", req, pd.DataFrame(columns=["req", "t_s"]), tl)


def test_the_gauges_catch_up_when_they_show_every_request_in_flight() -> None:
    # three sent at 0; the gauges show one, then all three; one finishes, the gauges show the other two
    run = _run([(-0.5, 0, 0), (0.0, 0, 0), (1.0, 1, 0), (2.0, 2, 1), (3.0, 2, 0)], [0.0, 0.0, 0.0], [2.5, 4.0, 4.0])
    assert kp.gauges_catch_up_s(run) == 2.0
    # a second wave sent later does not move it: the first wave was shown whole already
    late = _run([(0.0, 0, 0), (1.0, 2, 0), (2.0, 2, 0), (3.0, 2, 0)], [0.0, 0.0, 2.0], [4.0, 4.0, 5.0])
    assert kp.gauges_catch_up_s(late) == 1.0
    # gauges that never show them all: the whole run is marked
    never = _run([(0.0, 0, 0), (1.0, 1, 0), (2.0, 1, 0)], [0.0, 0.0], [3.0, 3.0])
    assert kp.gauges_catch_up_s(never) == 2.0
