"""Every protocol's answers reach lmms-eval's own scorers in a form they parse, and under the paper
protocol every scorer grades what the driver grades; task code that raises (`SystemExit` included)
makes an errored sample, counted wrong, not the end of the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from paravt.core.testing.stand_in import FakeChatServer

GT = [2.0, 7.0]
# lmms-eval 0.7.3's own Charades-STA functions, over documents in its row schema
CHARADES_YAML = """task: temporal_grounding_charades_fixture
dataset_path: json
dataset_kwargs:
  data_files:
    test: charades_fixture.jsonl
test_split: test
output_type: generate_until
doc_to_visual: !function lmms_eval.tasks.charades_sta.utils.temporal_grounding_doc_to_visual
doc_to_text: !function lmms_eval.tasks.charades_sta.utils.temporal_grounding_doc_to_text
doc_to_target: !function lmms_eval.tasks.charades_sta.utils.temporal_grounding_doc_to_answer
process_results: !function lmms_eval.tasks.charades_sta.utils.temporal_grounding_process_results_generation
metric_list:
  - metric: charades_sta_IOU@5
    aggregation: !function lmms_eval.tasks.charades_sta.utils.temporal_grounding_aggregate_iou5
    higher_is_better: true
  - metric: charades_sta_mIOU
    aggregation: !function lmms_eval.tasks.charades_sta.utils.temporal_grounding_aggregate_miou
    higher_is_better: true
lmms_eval_specific_kwargs:
  default:
    pre_prompt: "Please find the visual event described by a sentence in the video, determining its starting and ending times. The format should be: 'The event happens in the start time - end time'. For example, The event 'person turn a light on' happens in the 24.3 - 30.4 seonds. Now I will give you the textual sentence: "
    post_prompt: "Please return its start time and end time."
metadata:
  version: 0.1
"""


# Replies whose whole text a scorer could misread, and the letter the driver grades (None: none).
HARD_MCQ = [
    ("<think>It is not A, nor C.</think><answer>B</answer>", "B"),  # letters in the reasoning
    ("<think>A? No: the rider is on a bike <answer>B</answer>", "B"),  # think never closed
    ("<think>A horse would be taller, so the", "A"),  # cut off: the driver's first letter
    ("<think>C fits.</think><answer></answer>", "C"),  # empty answer: the driver reads on
    ("<think>hmm</think><answer> </answer>", None),  # nothing to read: wrong whatever the answer
    ("", None),  # an errored sample
]


def _videomme(answer: str, scored: str) -> bool:
    from lmms_eval.tasks.videomme.utils import videomme_process_results

    doc = {
        "answer": answer,
        "domain": "Knowledge",
        "sub_category": "Humanity & History",
        "task_type": "Object Recognition",
        "question_id": "001-1",
        "duration": "short",
        "videoID": "v",
    }
    return videomme_process_results(doc, [scored])["videomme_perception_score"]["score"] == 1.0


def _lvbench(answer: str, scored: str) -> bool:
    from lmms_eval.tasks.lvbench.utils import lvbench_process_results

    return bool(lvbench_process_results({"answer": answer}, [scored])["lvbench_score"])


def _mlvu(answer: str, scored: str) -> bool:
    from lmms_eval.tasks.mlvu.utils import mlvu_process_results

    doc = {"answer": answer, "task_type": "plotQA", "question": "q"}
    result = mlvu_process_results(doc, [scored])["mlvu_percetion_score"]
    return bool(result["pred_answer"] == result["answer"])  # mlvu_aggregate_results_dev's test


def _paravt_paper(answer: str, scored: str) -> bool:
    from paravt.eval.paper_tasks import process_mcq

    return process_mcq({"paravt_answer": answer, "id": "hard"}, [scored])["accuracy"] == 1.0


@pytest.mark.parametrize(("reply", "letter"), HARD_MCQ)
def test_under_the_paper_protocol_lmms_evals_scorers_grade_what_the_driver_grades(reply, letter):
    """VideoMME, LVBench, MLVU (lmms-eval's own scorers) and paravt_paper grade the driver's letter,
    not letters of the reasoning; an empty or errored answer is wrong for every answer. (lmms-eval's
    LongVideoBench scorer picks a random letter for a reply without one, by its authors' rule; it
    needs decord, absent here.)"""
    from paravt.core import PAPER_PROTOCOL
    from paravt.core.paper_protocol import driver_letter

    scored = PAPER_PROTOCOL.extract_answer(reply, None, "mcq")
    for answer in "ABCD":
        right = answer == letter
        assert (driver_letter(reply) == answer) == right  # the driver's own grade
        for scorer in (_videomme, _lvbench, _mlvu, _paravt_paper):
            assert scorer(answer, scored) == right, (scorer.__name__, reply, answer, scored)


@pytest.mark.parametrize(
    "reply",
    [
        "The event happens in the 2.0 - 6.5 seconds.",
        "<time>00:02.0 - 00:06.5</time>",  # lmms-eval alone reads clock times its own way
        "from 0:02 – 0:06.5",
        "<answer>[2.0, 6.25]</answer>",  # lmms-eval alone finds no span in a bracket pair
        "starting at 3.125 and ending at 9",
        "begin 6.5 end 2",  # reversed: IoU 0 for the driver; lmms-eval alone would reorder it
        "no idea",
        "",  # an errored sample
    ],
)
def test_under_the_paper_protocol_grounding_spans_score_the_drivers_iou(reply):
    from lmms_eval.tasks.charades_sta.utils import _temporal_grounding_compute_metrics

    from paravt.core import PAPER_PROTOCOL
    from paravt.core.paper_protocol import driver_iou, driver_span
    from paravt.eval.paper_tasks import process_grounding

    span = driver_span(reply)
    driver = driver_iou(span, GT) if span else 0.0
    scored = PAPER_PROTOCOL.extract_answer(reply, None, "grounding")
    lmms = _temporal_grounding_compute_metrics([{f"v.mp4>>>caption>>>{GT}": scored}])
    assert lmms["mIOU"] / 100 == pytest.approx(driver), (reply, scored)
    paper = process_grounding({"paravt_answer": json.dumps(GT), "id": "hard"}, [scored])
    assert paper["miou"] == pytest.approx(driver)


def test_lmms_evals_charades_parser_reads_our_grounding_form_and_not_a_bracket_pair():
    from lmms_eval.tasks.charades_sta.utils import extract_time

    from paravt.core import PARAVT_PROTOCOL

    ours = PARAVT_PROTOCOL.extract_answer("", "[2.0, 6.5]", "grounding")
    assert extract_time(ours) == [[2.0, 6.5]]
    assert extract_time("[2.0, 6.5]") == []  # why the plugin rewrites the span


@pytest.mark.slow
@pytest.mark.parametrize(
    ("protocol", "reply"),
    [
        ("paravt", "The person rides past.</think><answer>[2.0, 6.5]</answer>"),
        ("paper", "The event happens in the 2.0 - 6.5 seconds."),
    ],
)
def test_charades_scored_by_lmms_eval_with_a_sys_exit_sample(
    protocol, reply, bikes_mp4, tmp_path, offline_env
):
    hf_home = tmp_path / "hf"
    videos = hf_home / "charades_sta" / "Charades_v1_480"
    videos.mkdir(parents=True)
    (videos / "bikes.mp4").symlink_to(bikes_mp4)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "charades_fixture.yaml").write_text(CHARADES_YAML)
    docs = [
        {"video": "bikes.mp4", "caption": "a person rides a bike past the camera", "timestamp": GT},
        # lmms-eval's doc_to_visual calls sys.exit for a missing video
        {"video": "missing.mp4", "caption": "a person opens a door", "timestamp": GT},
    ]
    (tasks / "charades_fixture.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    env = dict(offline_env, HF_HOME=str(hf_home))
    traces = tmp_path / "traces.jsonl"
    with FakeChatServer(lambda body: reply) as server:
        cmd = [
            sys.executable,
            "-m",
            "lmms_eval",
            "--model",
            "paravt",
            "--model_args",
            f"base_url={server.base_url},model=fake,protocol={protocol},main_nframes=8,"
            f"traces={traces}",
            "--tasks",
            "temporal_grounding_charades_fixture",
            "--include_path",
            str(tasks),
            "--output_path",
            str(tmp_path / "out"),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [results_file] = list((tmp_path / "out").rglob("*_results.json"))
    results = json.loads(results_file.read_text())["results"]["temporal_grounding_charades_fixture"]
    # one sample at IoU 4.5 / 5 = 0.9, the errored one at 0: lmms-eval reports percentages
    assert results["charades_sta_mIOU,none"] == pytest.approx(45.0)
    assert results["charades_sta_IOU@5,none"] == pytest.approx(50.0)
    rows = [json.loads(x) for x in Path(traces).read_text().splitlines()]
    errored = [r for r in rows if r["error"]]
    assert len(rows) == 2 and len(errored) == 1
    assert "SystemExit" in errored[0]["error"]
    summary = json.loads(traces.with_name(traces.stem + ".summary.json").read_text())
    assert summary["temporal_grounding_charades_fixture"]["errored"] == 1
