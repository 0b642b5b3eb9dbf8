"""Writes the sparse example's data: libsvm files of click-like examples.

Each example has 5-15 feature ids out of 1000; a hidden weight per id makes
the label 1 when the ids' weights sum above zero (with 5% label noise), so a
model must learn a weight per id: what an embedding bag is for.

  python3 examples/make_sparse_data.py OUT_DIR   # train.svm (20k), test.svm (5k)
"""
import os
import random
import sys


def write(path, n, rng, weights):
    with open(path, "w") as f:
        for _ in range(n):
            ids = rng.sample(range(1000), rng.randint(5, 15))
            score = sum(weights[i] for i in ids)
            label = 1 if score > 0 else 0
            if rng.random() < 0.05:
                label = 1 - label
            f.write("%d %s\n" % (label, " ".join("%d:1" % i for i in sorted(ids))))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/psrt-sparse"
    os.makedirs(out, exist_ok=True)
    rng = random.Random(7)
    weights = [rng.gauss(0, 1) for _ in range(1000)]
    write(os.path.join(out, "train.svm"), 20000, rng, weights)
    write(os.path.join(out, "test.svm"), 5000, rng, weights)
    print("wrote", out)


if __name__ == "__main__":
    main()
