"""Keras' own metrics on the predictions and labels psrt's metric kernels saw.

Reads --dir/classes.txt (label then 10 logits a line), binary.txt (label,
probability) and regression.txt (label, prediction), as psrt's test wrote
them (floats printed with %.9g: the same float32 values), and prints one
line per metric, "name value", from keras.metrics, plus the exact ROC AUC
(Mann-Whitney, ties counting a half) for comparison with Keras' 200
thresholds.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402


def load(path):
    a = np.loadtxt(path, dtype=np.float64, ndmin=2)
    return a[:, 0], a[:, 1:].astype(np.float32)


def value(metric, y_true, y_pred):
    metric.update_state(y_true, y_pred)
    return float(metric.result())


def exact_auc(labels, scores):
    pos = scores[labels > 0.5].astype(np.float64)
    neg = scores[labels <= 0.5].astype(np.float64)
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return (greater + 0.5 * ties) / (len(pos) * len(neg))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    d = p.parse_args().dir
    y, logits = load(os.path.join(d, "classes.txt"))
    y = y.astype(np.int64)
    print("accuracy", value(keras.metrics.SparseCategoricalAccuracy(), y, logits))
    print("top_k_accuracy", value(keras.metrics.SparseTopKCategoricalAccuracy(k=5), y, logits))
    print("top_3_accuracy", value(keras.metrics.SparseTopKCategoricalAccuracy(k=3), y, logits))
    y, prob = load(os.path.join(d, "binary.txt"))
    y = y.astype(np.float32).reshape(-1, 1)
    print("binary_accuracy", value(keras.metrics.BinaryAccuracy(threshold=0.5), y, prob))
    print("precision", value(keras.metrics.Precision(), y, prob))
    print("recall", value(keras.metrics.Recall(), y, prob))
    print("auc", value(keras.metrics.AUC(), y, prob))
    print("exact_auc", exact_auc(y.ravel(), prob.ravel()))
    y, pred = load(os.path.join(d, "regression.txt"))
    print("mae", value(keras.metrics.MeanAbsoluteError(), y.astype(np.float32).reshape(-1, 1), pred))
    print("keras", keras.__version__)
    print("OK")


if __name__ == "__main__":
    main()
