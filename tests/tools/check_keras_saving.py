"""Checks psrt's Keras 3 exports (.weights.h5 and .keras) with Keras itself.

The model is built as a Keras user would from the job file's layer list,
with Keras' default layer names: once as a keras.Sequential and once with
the Functional API. Then:
  1. the .weights.h5 file has the groups, datasets, shapes and dtypes that
     Keras writes itself for that model (model.save_weights, listed with
     h5py), and every dataset holds psrt's values bit for bit;
  2. model.load_weights(.weights.h5) restores every weight of both models
     bit for bit (Keras raises on a partial load; each weight is compared
     with psrt's too), after compile() as well;
  3. keras.models.load_model(.keras) opens the archive with no custom code,
     its weights are psrt's, and model.load_weights(.keras) into the
     Functional model works;
  4. on the test split the loaded models predict identically and their
     accuracy equals psrt's evaluation of the same weights to 1e-5.
Prints "OK" at the end; exits non-zero, saying why, on a mismatch.

usage: check_keras_saving.py --job J.pbtxt --input_shape 28,28,1 --weights_h5 W --keras K
       --raw_dir D --images I.gz --labels L.gz --scale S --examples N --psrt_accuracy A
"""
import argparse
import os
import re
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_export import fail, read_idx  # noqa: E402


def job_layers(keras, path):
    """The job file's layer list (one `layer { kind { fields } }` a line, as
    in examples/), as the Keras layers a user writes for it."""
    text = open(path).read()
    acts = {"RELU": "relu", "SIGMOID": "sigmoid", "TANH": "tanh", "SOFTMAX": "softmax", None: None}
    layers = []
    for kind, body in re.findall(r"layer\s*\{\s*(\w+)\s*\{([^}]*)\}\s*\}", text):
        f = dict(re.findall(r"(\w+):\s*([\w.]+)", body))
        act = acts[f.get("activation")]
        if kind == "dense":
            layers.append(keras.layers.Dense(int(f["units"]), activation=act))
        elif kind == "conv2d":
            layers.append(keras.layers.Conv2D(int(f["filters"]), int(f["kernel_size"]),
                                              strides=int(f.get("stride", 1)),
                                              padding=f.get("padding", "VALID").lower(), activation=act))
        elif kind == "max_pool2d":
            size = int(f.get("pool_size", 2))
            layers.append(keras.layers.MaxPooling2D(size, strides=int(f.get("stride", size)),
                                                    padding=f.get("padding", "VALID").lower()))
        elif kind == "flatten":
            layers.append(keras.layers.Flatten())
        elif kind == "dropout":
            layers.append(keras.layers.Dropout(float(f["rate"])))
        elif kind == "activation":
            layers.append(keras.layers.Activation(act))
        else:
            fail("the checker has no Keras layer for %s" % kind)
    return layers


def h5_listing(h5py, path):
    out = {}
    with h5py.File(path, "r") as h:
        def visit(name, obj):
            out[name] = (obj.dtype.str, obj.shape) if isinstance(obj, h5py.Dataset) else "group"
        h.visititems(visit)
    return out


def check_weights(model, raw, what):
    if len(model.weights) != len(raw):
        fail("%s has %d weights, psrt exported %d" % (what, len(model.weights), len(raw)))
    for w, (name, dims, data) in zip(model.weights, raw):
        v = np.asarray(w.numpy())
        if list(v.shape) != dims or v.tobytes() != data:
            fail("%s: weight %s is not psrt's %s %s" % (what, w.path, name, dims))


def main():
    p = argparse.ArgumentParser()
    for flag in ["job", "weights_h5", "keras", "raw_dir", "images", "labels"]:
        p.add_argument("--" + flag, required=True)
    p.add_argument("--input_shape", required=True)  # "28,28,1"
    p.add_argument("--scale", type=float, required=True)
    p.add_argument("--examples", type=int, required=True)
    p.add_argument("--psrt_accuracy", type=float, required=True)
    a = p.parse_args()

    import h5py
    import keras

    shape = tuple(int(d) for d in a.input_shape.split(","))

    raw = []  # (psrt variable, shape, bytes) in the layers' order, kernel before bias
    with open(os.path.join(a.raw_dir, "variables.txt")) as f:
        for line in f:
            _, name, fname, dims = line.rstrip("\n").split("\t")
            raw.append((name, [int(d) for d in dims.split(",") if d],
                        open(os.path.join(a.raw_dir, fname), "rb").read()))

    def sequential():
        return keras.Sequential([keras.Input(shape)] + job_layers(keras, a.job))

    def functional():
        inputs = x = keras.Input(shape)
        for layer in job_layers(keras, a.job):
            x = layer(x)
        return keras.Model(inputs, x)

    # 1. The layout Keras writes itself for this model.
    mine = h5_listing(h5py, a.weights_h5)
    with tempfile.TemporaryDirectory() as tmp:
        theirs_path = os.path.join(tmp, "keras.weights.h5")
        sequential().save_weights(theirs_path)
        theirs = h5_listing(h5py, theirs_path)
    if mine != theirs:
        fail("the .weights.h5 layout differs from Keras' own:\n  psrt:  %s\n  keras: %s" %
             (sorted(mine.items()), sorted(theirs.items())))
    with h5py.File(a.weights_h5, "r") as h:
        datasets = [k for k, v in sorted(mine.items()) if v != "group"]
        by_bytes = {data: name for name, _, data in raw}
        for k in datasets:
            if h[k][()].tobytes() not in by_bytes:
                fail("dataset %s holds none of psrt's values" % k)
    print("weights_h5: %d groups and datasets as Keras writes them (%d datasets, psrt's values)" %
          (len(mine), len(datasets)))

    # 2. load_weights into a Sequential and a Functional model.
    models = {}
    for what, build in [("Sequential", sequential), ("Functional", functional)]:
        m = build()
        m.load_weights(a.weights_h5)
        check_weights(m, raw, what + ".load_weights")
        models[what] = m
    compiled = functional()
    compiled.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    compiled.load_weights(a.weights_h5)
    check_weights(compiled, raw, "compiled Functional.load_weights")
    print("load_weights: Sequential, Functional and compiled Functional restored %d weights" % len(raw))

    # 3. load_model on the .keras archive, and its weights into a Functional model.
    loaded = keras.models.load_model(a.keras)
    check_weights(loaded, raw, "load_model")
    models["load_model"] = loaded
    f = functional()
    f.load_weights(a.keras)
    check_weights(f, raw, "Functional.load_weights(.keras)")
    print("load_model: %s %s restored %d weights" %
          (loaded.__class__.__name__, [l.__class__.__name__ for l in loaded.layers], len(loaded.weights)))

    # 4. Accuracy on the test split.
    images = read_idx(a.images, a.examples).astype(np.float32) * np.float32(a.scale)
    x = images.reshape((images.shape[0],) + shape)
    labels = read_idx(a.labels, a.examples).astype(np.int64)
    outputs = {k: m.predict(x, batch_size=500, verbose=0) for k, m in models.items()}
    first = outputs["Sequential"]
    for k, out in outputs.items():
        if not np.array_equal(out, first):
            fail("%s predicts otherwise than Sequential (max diff %g)" % (k, np.max(np.abs(out - first))))
    acc = float(np.mean(np.argmax(first, 1) == labels))
    print("examples %d: Keras accuracy %.6f (Sequential, Functional, load_model alike), psrt %.6f" %
          (len(labels), acc, a.psrt_accuracy))
    if abs(acc - a.psrt_accuracy) > 1e-5:
        fail("Keras' accuracy %.6f is not psrt's %.6f" % (acc, a.psrt_accuracy))
    print("OK")


if __name__ == "__main__":
    main()
