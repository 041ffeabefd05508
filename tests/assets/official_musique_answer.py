"""FROZEN REFERENCE COPY — do not edit. Used only by tests/metrics to check kgreason.metrics.

Source: MuSiQue metrics/answer.py (answer EM/F1, adapted by the MuSiQue authors from the
SQuAD 2.0 evaluation script), https://github.com/StonyBrookNLP/musique/blob/main/metrics/answer.py
Licence: Apache License 2.0 (https://github.com/StonyBrookNLP/musique/blob/main/LICENSE),
Copyright the MuSiQue authors (Trivedi, Balasubramanian, Khot, Sabharwal).

Transcription note: the scoring functions, written out from the published file; the
``AnswerMetric`` accumulator class is reduced to its per-example call. The logic is verbatim.
"""
import collections
import re
import string
from typing import List


def normalize_answer(s):
    """Lower text and remove punctuation, articles and extra whitespace."""

    def remove_articles(text):
        regex = re.compile(r"\b(a|an|the)\b", re.UNICODE)
        return re.sub(regex, " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def get_tokens(s):
    if not s:
        return []
    return normalize_answer(s).split()


def compute_exact(a_gold, a_pred):
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold, a_pred):
    gold_toks = get_tokens(a_gold)
    pred_toks = get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        # If either is no-answer, then F1 is 1 if they agree, 0 otherwise
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


def answer_metric(predicted_answer: str, ground_truth_answers: List[str]):
    """``AnswerMetric.__call__``: (exact, f1) maxed over the answer and its aliases."""
    exact_scores = metric_max_over_ground_truths(compute_exact, predicted_answer, ground_truth_answers)
    f1_scores = metric_max_over_ground_truths(compute_f1, predicted_answer, ground_truth_answers)
    return exact_scores, f1_scores
