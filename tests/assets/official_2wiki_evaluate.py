"""FROZEN REFERENCE COPY — do not edit. Used only by tests/metrics to check kgreason.metrics.

Source: 2WikiMultihopQA 2wikimultihop_evaluate_v1.1.py (derived from hotpot_evaluate_v1.py),
https://github.com/Alab-NII/2wikimultihop/blob/main/2wikimultihop_evaluate_v1.1.py
Licence: Apache License 2.0 (https://github.com/Alab-NII/2wikimultihop/blob/main/LICENSE),
Copyright the 2WikiMultihopQA authors (Ho, Duong Nguyen, Sugawara, Aizawa).

Transcription note: the answer-scoring functions, written out from the published script (the
evidence/supporting-fact scoring and file I/O are omitted). The gold list is the answer plus
its aliases from ``id_aliases.json``; ``update_answer`` keeps the best score over them.
"""
import re
import string
from collections import Counter


def normalize_answer(s):

    def remove_articles(text):
        return re.sub(r'\b(a|an|the)\b', ' ', text)

    def white_space_fix(text):
        return ' '.join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return ''.join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def f1_score(prediction, ground_truth):
    normalized_prediction = normalize_answer(prediction)
    normalized_ground_truth = normalize_answer(ground_truth)

    ZERO_METRIC = (0, 0, 0)

    if normalized_prediction in ['yes', 'no', 'noanswer'] and normalized_prediction != normalized_ground_truth:
        return ZERO_METRIC
    if normalized_ground_truth in ['yes', 'no', 'noanswer'] and normalized_prediction != normalized_ground_truth:
        return ZERO_METRIC

    prediction_tokens = normalized_prediction.split()
    ground_truth_tokens = normalized_ground_truth.split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return ZERO_METRIC
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1, precision, recall


def exact_match_score(prediction, ground_truth):
    return (normalize_answer(prediction) == normalize_answer(ground_truth))


def update_answer(metrics, prediction, golds):
    max_em, max_f1, max_prec, max_recall = 0, 0, 0, 0

    for gold in golds:
        em = exact_match_score(prediction, gold)
        f1, prec, recall = f1_score(prediction, gold)

        max_em = max(max_em, em)
        max_f1 = max(f1, max_f1)
        max_prec = max(prec, max_prec)
        max_recall = max(recall, max_recall)

    metrics['em'] += float(max_em)
    metrics['f1'] += max_f1
    metrics['prec'] += max_prec
    metrics['recall'] += max_recall

    return max_em, max_prec, max_recall
