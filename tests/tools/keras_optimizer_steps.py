"""Keras 3's own optimizers, six steps each, for tests/keras_optimizer_test.

Writes one text file that the C++ test reads: the initial variable, the
gradient of each step, and for each rule its name, the psrt OptimizerDef
(text format, on one line) with the same hyper-parameters, the names of the
slots Keras made for it (in Keras' order) and the variable after each of
Keras' steps. Every number is a float32 printed with 9 significant digits,
which reads back to the same float.

  keras_optimizer_steps.py --out=FILE

Format, one record a line, fields separated by single spaces:
  shape R C
  init v...
  grad STEP v...                 (STEP 1..6)
  rule NAME                      (then, for that rule:)
  psrt OPTIMIZER_DEF_TEXT        (the rest of the line)
  slots NAME...                  (Keras' slot names, the variable's prefix cut)
  after STEP v...
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import keras  # noqa: E402

STEPS = 6
SHAPE = (4, 6)


def rules():
    """(name, Keras optimizer, psrt OptimizerDef text) with equal settings.

    Keras' defaults are written out where ours differ or where our field's
    0 means a default, so the pair visibly matches. Constant learning rates.
    """
    o = keras.optimizers
    return [
        ("sgd", o.SGD(learning_rate=0.05), "sgd { learning_rate: 0.05 }"),
        ("momentum", o.SGD(learning_rate=0.05, momentum=0.9),
         "momentum { learning_rate: 0.05 momentum: 0.9 }"),
        ("nesterov", o.SGD(learning_rate=0.05, momentum=0.9, nesterov=True),
         "momentum { learning_rate: 0.05 momentum: 0.9 nesterov: true }"),
        # Keras: initial_accumulator_value 0.1, epsilon 1e-7 (ours: 0 = 0.1,
        # and a fixed 1e-7).
        ("adagrad", o.Adagrad(learning_rate=0.1, initial_accumulator_value=0.1, epsilon=1e-7),
         "adagrad { learning_rate: 0.1 initial_accumulator: 0.1 }"),
        ("adam", o.Adam(learning_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-7),
         "adam { learning_rate: 0.01 }"),
        ("adam_b0.8_0.99_eps1e-4", o.Adam(learning_rate=0.01, beta_1=0.8, beta_2=0.99, epsilon=1e-4),
         "adam { learning_rate: 0.01 beta1: 0.8 beta2: 0.99 epsilon: 1e-4 }"),
        # Keras' default weight_decay (0.004) against ours unset.
        ("adamw", o.AdamW(learning_rate=0.01),
         "adamw { learning_rate: 0.01 }"),
        ("adamw_wd0.1", o.AdamW(learning_rate=0.01, weight_decay=0.1),
         "adamw { learning_rate: 0.01 weight_decay: 0.1 }"),
        ("rmsprop", o.RMSprop(learning_rate=0.01),
         "rmsprop { learning_rate: 0.01 }"),
        ("rmsprop_centered", o.RMSprop(learning_rate=0.01, centered=True),
         "rmsprop { learning_rate: 0.01 centered: true }"),
        ("rmsprop_momentum", o.RMSprop(learning_rate=0.01, momentum=0.9),
         "rmsprop { learning_rate: 0.01 momentum: 0.9 }"),
        ("rmsprop_centered_momentum_rho0.8",
         o.RMSprop(learning_rate=0.01, rho=0.8, momentum=0.5, epsilon=1e-6, centered=True),
         "rmsprop { learning_rate: 0.01 rho: 0.8 momentum: 0.5 epsilon: 1e-6 centered: true }"),
    ]


def floats(values):
    return " ".join("%.9g" % float(x) for x in np.asarray(values, np.float32).ravel())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    rng = np.random.default_rng(25)
    # Magnitudes from 1e-3 to a few units, both signs; one element at 0.
    init = (rng.standard_normal(SHAPE) * np.exp(rng.uniform(-4, 1, SHAPE))).astype(np.float32)
    init[0, 0] = 0
    grads = []
    for step in range(STEPS):
        g = (rng.standard_normal(SHAPE) * np.exp(rng.uniform(-5, 2, SHAPE))).astype(np.float32)
        g[1, step % SHAPE[1]] = 0  # an element whose gradient is 0 at one step
        grads.append(g)

    lines = ["shape %d %d" % SHAPE, "init " + floats(init)]
    lines += ["grad %d %s" % (t + 1, floats(g)) for t, g in enumerate(grads)]
    for name, opt, psrt in rules():
        var = keras.Variable(init.copy(), name="w", dtype="float32")
        lines += ["rule " + name, "psrt " + psrt]
        for t, g in enumerate(grads):
            opt.apply_gradients([(keras.ops.convert_to_tensor(g), var)])
            if t == 0:
                slots = [v.name[len("w_"):] for v in opt.variables
                         if v.name not in ("iteration", "learning_rate")]
                lines.append("slots " + " ".join(slots))
            lines.append("after %d %s" % (t + 1, floats(keras.ops.convert_to_numpy(var.value))))
        assert int(opt.iterations.numpy()) == STEPS, name
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("keras %s: %d rules, %d steps, written to %s" % (keras.__version__, len(rules()), STEPS, args.out))


if __name__ == "__main__":
    main()
