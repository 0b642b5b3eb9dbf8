"""Checks psrt's exported model files with the real readers.

TensorFlow: tf.train.load_checkpoint reads every variable bit for bit as
psrt holds it (the raw files the C++ test wrote), and Keras 3 models built
from PREFIX.keras.json, Sequential and Functional, restore through
tf.train.Checkpoint with every value consumed. ONNX: onnx's checker accepts the model, and ONNX Runtime's
outputs on the first test examples match the Keras model's within float
tolerance, with an accuracy equal to psrt's own evaluation of the same
weights (up to a few near-ties). Exits non-zero, saying why, on a mismatch.

usage: check_export.py --tf_prefix P --onnx M --raw_dir D --images I.gz
       --labels L.gz --scale S --examples N --psrt_accuracy A
"""
import argparse
import gzip
import json
import os
import struct
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def read_idx(path, count):
    with gzip.open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        rank = magic & 0xFF
        dims = struct.unpack(">" + "I" * rank, f.read(4 * rank))
        n = min(count, dims[0])
        per = int(np.prod(dims[1:])) if rank > 1 else 1
        data = np.frombuffer(f.read(n * per), dtype=np.uint8)
        return data.reshape((n,) + tuple(dims[1:]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tf_prefix", required=True)
    p.add_argument("--onnx", required=True)
    p.add_argument("--raw_dir", required=True)
    p.add_argument("--images", required=True)
    p.add_argument("--labels", required=True)
    p.add_argument("--scale", type=float, required=True)
    p.add_argument("--examples", type=int, required=True)
    p.add_argument("--psrt_accuracy", type=float, required=True)
    a = p.parse_args()

    import tensorflow as tf
    import keras
    import onnx
    import onnxruntime as ort

    # 1. The checkpoint as TensorFlow reads it, against psrt's bytes.
    expected = {}
    by_name = {}  # psrt variable -> checkpoint key
    with open(os.path.join(a.raw_dir, "variables.txt")) as f:
        for line in f:
            key, name, fname, shape = line.rstrip("\n").split("\t")
            dims = [int(d) for d in shape.split(",") if d]
            raw = open(os.path.join(a.raw_dir, fname), "rb").read()
            expected[key] = (dims, raw)
            by_name[name] = key
    reader = tf.train.load_checkpoint(a.tf_prefix)
    stored = {k for k in reader.get_variable_to_shape_map() if k != "_CHECKPOINTABLE_OBJECT_GRAPH"}
    if stored != set(expected):
        fail("checkpoint keys %s, expected %s" % (sorted(stored), sorted(expected)))
    for key, (dims, raw) in expected.items():
        t = reader.get_tensor(key)
        if t.dtype != np.float32 or list(t.shape) != dims:
            fail("%s: %s %s, expected float32 %s" % (key, t.dtype, t.shape, dims))
        if t.tobytes() != raw:
            fail("%s: values differ from psrt's" % key)
    print("tf.train.load_checkpoint: %d variables bit-identical" % len(expected))

    # 2. A Keras model built from the same layer list restores them.
    desc = json.load(open(a.tf_prefix + ".keras.json"))
    layers = [keras.layers.deserialize(l) for l in desc["layers"]]
    model = keras.Sequential([keras.Input(tuple(desc["input_shape"]))] + layers)
    tf.train.Checkpoint(model=model).read(a.tf_prefix).assert_consumed()
    restored = 0
    for w in model.weights:
        # Keras paths are "<layer name>/<variable>": the layer names are
        # psrt's, so these are psrt's variable names.
        path = w.path[len(model.name) + 1:] if w.path.startswith(model.name + "/") else w.path
        key = by_name.get(path)
        if key is None:
            fail("Keras weight %s is no variable psrt exported (%s)" % (path, sorted(by_name)))
        if np.asarray(w.numpy()).tobytes() != expected[key][1]:
            fail("Keras weight %s differs from psrt's" % w.path)
        restored += 1
    if restored != len(expected):
        fail("Keras model restored %d of %d variables" % (restored, len(expected)))
    print("keras: %s restored %d variables" % ([l.__class__.__name__ for l in model.layers], restored))

    # 2b. So does a Functional model of the same layers (with Keras' own
    # default names), every value in the same order.
    inputs = x = keras.Input(tuple(desc["input_shape"]))
    for l in desc["layers"]:
        config = dict(l, config={k: v for k, v in l["config"].items() if k != "name"})
        x = keras.layers.deserialize(config)(x)
    functional = keras.Model(inputs, x)
    tf.train.Checkpoint(model=functional).read(a.tf_prefix).assert_consumed()
    if len(functional.weights) != len(model.weights):
        fail("Functional model has %d weights, Sequential %d" % (len(functional.weights), len(model.weights)))
    for f, s in zip(functional.weights, model.weights):
        if np.asarray(f.numpy()).tobytes() != np.asarray(s.numpy()).tobytes():
            fail("Functional weight %s differs from Sequential %s" % (f.path, s.path))
    print("keras: a Functional model restored the same %d variables" % len(functional.weights))

    # 3. ONNX Runtime against Keras and psrt on the first test examples.
    images = read_idx(a.images, a.examples).astype(np.float32) * np.float32(a.scale)
    x = images.reshape((images.shape[0],) + tuple(desc["input_shape"]))
    labels = read_idx(a.labels, a.examples).astype(np.int64)
    onnx.checker.check_model(onnx.load(a.onnx), full_check=True)
    sess = ort.InferenceSession(a.onnx, providers=["CPUExecutionProvider"])
    ort_out = sess.run(["output"], {sess.get_inputs()[0].name: x})[0]
    keras_out = model.predict(x, batch_size=500, verbose=0)
    diff = float(np.max(np.abs(ort_out - keras_out)))
    scale = float(np.max(np.abs(keras_out)))
    if diff > 1e-4 * max(1.0, scale):
        fail("ONNX Runtime and Keras outputs differ by %g (outputs up to %g)" % (diff, scale))
    agree = float(np.mean(np.argmax(ort_out, 1) == np.argmax(keras_out, 1)))
    acc_ort = float(np.mean(np.argmax(ort_out, 1) == labels))
    acc_keras = float(np.mean(np.argmax(keras_out, 1) == labels))
    print("examples %d: ONNX Runtime accuracy %.6f, Keras %.6f, psrt %.6f; max |ORT - Keras| %.3g; "
          "argmax agreement %.4f" % (len(labels), acc_ort, acc_keras, a.psrt_accuracy, diff, agree))
    # psrt's kernels sum in another order: a near-tie may flip, no more.
    if abs(acc_ort - a.psrt_accuracy) > 2.0 / len(labels):
        fail("ONNX Runtime's accuracy %.6f is not psrt's %.6f" % (acc_ort, a.psrt_accuracy))
    print("OK")


if __name__ == "__main__":
    main()
