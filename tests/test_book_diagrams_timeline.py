import matplotlib
import pytest
from matplotlib import pyplot as plt

from servelab.book.diagrams_timeline import draw_timeline, timeline_comparison
from servelab.sim.chunked_prefill import LONG, CostModel, Scenario, SchedulerConfig, run_scenario

matplotlib.use("Agg")  # tests only; notebooks keep their inline backend

COST = CostModel(0.01, 0.0005, 0.001, 1e-6)
SCENARIO = Scenario(streams=3, stream_prompt_tokens=16, stream_output_tokens=60, long_prompt_tokens=600)


def _run(**kwargs):
    return run_scenario(SCENARIO, SchedulerConfig(**kwargs), COST)


def test_timeline_draws_one_box_per_request_and_step_with_the_long_prompt_on_top():
    result = _run(budget=256)
    ax = draw_timeline(result.steps, highlight=LONG)
    assert len(ax.patches) == len(result.steps)
    plt.close("all")
    start = result.request(LONG).arrival_s
    ax = draw_timeline(result.steps, highlight=LONG, window=(start, result.token_times[LONG][-1]))
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[-1] == "long prompt" and labels[:-1] == ["stream 0", "stream 1", "stream 2"]
    chunk_texts = sorted(int(t.get_text()) for t in ax.texts)
    assert chunk_texts == sorted(result.steps.query("request == @LONG and kind == 'prefill'")["tokens"])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["prefill", "decode"]
    plt.close("all")


def test_comparison_stacks_runs_on_one_time_axis_and_window_keeps_overlapping_steps():
    chunked, whole = _run(budget=128), _run(budget=128, chunking=False, engine="sglang")
    start = chunked.request(LONG).arrival_s
    window = (start, start + 1.0)
    fig = timeline_comparison({"chunked": chunked.steps, "not chunked": whole.steps}, highlight=LONG, window=window)
    top, bottom = fig.axes
    assert top.get_title() == "chunked" and bottom.get_title() == "not chunked"
    assert top.get_legend() is not None and bottom.get_legend() is None
    assert top.get_xlim() == pytest.approx(window) and top.get_shared_x_axes().joined(top, bottom)
    inside = chunked.steps[(chunked.steps.end_s > window[0]) & (chunked.steps.start_s < window[1])]
    assert len(top.patches) == len(inside)
    assert top.get_xlabel() == "" and bottom.get_xlabel() == "time (s)"  # one x label, under the last panel
    plt.close("all")
    fig = timeline_comparison({"in steps": chunked.steps}, xlabel="time (in steps)")
    assert fig.axes[0].get_xlabel() == "time (in steps)"
    plt.close("all")


def test_bad_timeline_input_is_one_clear_error():
    steps = _run(budget=128).steps
    with pytest.raises(ValueError, match="missing: tokens"):
        draw_timeline(steps.drop(columns="tokens"))
    with pytest.raises(ValueError, match="no step in the window"):
        draw_timeline(steps, window=(1e6, 2e6))
    plt.close("all")


def test_rows_keep_one_order_and_decodes_stalled_by_a_whole_prompt_are_hatched():
    whole = _run(budget=None, chunking=False)  # the 600-token prompt in one step: the streams' decode box is long
    ax = draw_timeline(whole.steps, highlight=LONG)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["stream 0", "stream 1", "stream 2", "long prompt"]
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == SCENARIO.streams  # one long decode box per stream, in the long prompt's step
    plt.close("all")
    ax = draw_timeline(_run(budget=20).steps, highlight=LONG)  # small chunks: no step twice a decode step
    assert not [p for p in ax.patches if p.get_hatch()]
    plt.close("all")
