"""Checks a .keras file psrt exported with --include_optimizer, with Keras 3.

  1. keras.models.load_model opens it compiled: the optimizer is the job's
     (class and hyper-parameters), its iterations are psrt's update count
     (and the checkpoint's step), and every slot variable, found by Keras'
     own variable name (not by position), equals psrt's slot (Keras' SGD:
     -learning_rate times psrt's accumulator) to 1e-6;
  2. one model.train_on_batch on a fixed batch (the first test images) from
     the loaded state gives the weights psrt's own update rule
     (common/optimizer.cc, written out below in float32 numpy) gives from
     psrt's checkpointed weights and slots with the same gradient, to 1e-6;
     the gradients and Keras' weights after the step are written to
     raw_dir (grad<i>.bin, keras_after<i>.bin) for the C++ test to apply
     psrt's Optimizer itself to;
  3. the same step in a Keras model whose optimizer was built by hand
     (keras.optimizers.<Class>(...), slots assigned by name from psrt's raw
     values) gives the same weights as the loaded one, to 1e-7;
  4. --plain: the file exported without the flag has no compile_config and no
     optimizer group, and loads uncompiled.
Prints "OK" at the end; exits non-zero, saying why, on a mismatch.

usage: check_keras_optimizer.py --keras K --plain P --raw_dir D --images I.gz --labels L.gz --scale S
       --input_shape 28,28,1 [--examples N --psrt_accuracy A (ignored)]
raw_dir: optimizer.txt (key value lines: kind, learning_rate, ..., step, updates) and
variables.txt (name, value file, shape, slot files separated by ',') in Keras' weight order.
"""
import argparse
import json
import os
import sys
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_export import fail, read_idx  # noqa: E402

f32 = np.float32


def read_raw(d):
    hp = {}
    for line in open(os.path.join(d, "optimizer.txt")):
        k, v = line.split()
        hp[k] = v
    variables = []
    for line in open(os.path.join(d, "variables.txt")):
        parts = line.rstrip("\n").split("\t")
        name, file, shape = parts[0], parts[1], [int(s) for s in parts[2].split(",") if s]
        load = lambda f: np.fromfile(os.path.join(d, f), dtype=np.float32).reshape(shape)
        slots = [load(f) for f in parts[3].split(",") if f] if len(parts) > 3 else []
        variables.append((name, load(file), slots))
    return hp, variables


# Keras' slot kinds for psrt's optimizer, each the psrt slot index and the factor.
def keras_slots(hp):
    kind, lr = hp["kind"], f32(hp["learning_rate"])
    if kind == "sgd":
        return []
    if kind == "momentum":
        return [("momentum", 0, -lr)] if float(hp["momentum"]) > 0 else []
    if kind in ("adam", "adamw"):
        return [("momentum", 0, f32(1)), ("velocity", 1, f32(1))]
    if kind == "rmsprop":
        out, i = [("velocity", 0, f32(1))], 1
        if float(hp["momentum"]) > 0:
            out.append(("momentum", i, f32(1)))
            i += 1
        if hp["centered"] == "1":
            out.append(("average_gradient", i, f32(1)))
        return out
    fail("unknown optimizer " + kind)


def psrt_update(hp, w, g, slots, t):
    """psrt's rule (common/optimizer.cc) for one variable, float32 as there;
    t is the update's 1-based count. Returns the new weight."""
    kind, lr = hp["kind"], f32(hp["learning_rate"])
    w, g, s = w.copy(), g.astype(np.float32), [x.copy() for x in slots]
    if kind == "sgd":
        return w - lr * g
    if kind == "momentum":
        m = f32(hp["momentum"])
        s[0] = m * s[0] + g
        return w - lr * (g + m * s[0]) if hp["nesterov"] == "1" else w - lr * s[0]
    if kind in ("adam", "adamw"):
        b1, b2, eps = f32(hp["beta1"]), f32(hp["beta2"]), f32(hp["epsilon"])
        if kind == "adamw":
            wd = f32(hp["weight_decay"])
            if wd != 0:
                w = w - w * wd * lr
        lr_t = f32(float(lr) * np.sqrt(1 - np.power(float(b2), float(t))) / (1 - np.power(float(b1), float(t))))
        if kind == "adam":
            s[0] = b1 * s[0] + (f32(1) - b1) * g
            s[1] = b2 * s[1] + (f32(1) - b2) * g * g
            return w - lr_t * s[0] / (np.sqrt(s[1]) + eps)
        s[0] = s[0] + (g - s[0]) * (f32(1) - b1)
        s[1] = s[1] + (g * g - s[1]) * (f32(1) - b2)
        return w - s[0] * lr_t / (np.sqrt(s[1]) + eps)
    if kind == "rmsprop":
        rho, mom, eps = f32(hp["rho"]), f32(hp["momentum"]), f32(hp["epsilon"])
        s[0] = rho * s[0] + (f32(1) - rho) * g * g
        i = 1
        m_i = None
        if mom > 0:
            m_i, i = i, i + 1
        den = s[0] + eps
        if hp["centered"] == "1":
            s[i] = rho * s[i] + (f32(1) - rho) * g
            den = s[0] - s[i] * s[i] + eps
        inc = lr * g / np.sqrt(den)
        if m_i is None:
            return w - inc
        s[m_i] = mom * s[m_i] + inc
        return w - s[m_i]
    fail("unknown optimizer " + kind)


def slot_by_name(optimizer, weight, kind):
    want = weight.path.replace("/", "_") + "_" + kind
    found = [v for v in optimizer.variables if v.path.split("/", 1)[-1] == want]
    if len(found) != 1:
        fail("optimizer has %d variables named %s: %s" % (len(found), want, [v.path for v in optimizer.variables]))
    return found[0]


def main():
    p = argparse.ArgumentParser()
    for flag in ["keras", "plain", "raw_dir", "images", "labels", "input_shape"]:
        p.add_argument("--" + flag, required=True)
    p.add_argument("--scale", type=float, required=True)
    p.add_argument("--examples", type=int, default=0)
    p.add_argument("--psrt_accuracy", default="")
    a = p.parse_args()
    import keras
    import tensorflow as tf

    hp, raw = read_raw(a.raw_dir)
    step, updates = int(hp["step"]), int(hp["updates"])
    print("keras %s; psrt %s, step %d, %d updates per variable" % (keras.__version__, hp["kind"], step, updates))

    # 4. Without the flag: no optimizer anywhere.
    with zipfile.ZipFile(a.plain) as z:
        if "compile_config" in json.loads(z.read("config.json")):
            fail("the plain export has a compile_config")
    import h5py
    import io
    with zipfile.ZipFile(a.plain) as z, h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as h:
        if "optimizer" in h:
            fail("the plain export has an optimizer group")
    if getattr(keras.models.load_model(a.plain), "optimizer", None) is not None:
        fail("the plain export loads compiled")
    print("plain export: no compile_config, no optimizer group, loads uncompiled")

    # 1. The loaded optimizer.
    with zipfile.ZipFile(a.keras) as z, h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as h:
        listing = ["%s %s %s" % (k, h["optimizer/vars"][k].dtype, h["optimizer/vars"][k].shape)
                   for k in sorted(h["optimizer/vars"].keys(), key=int)]
        print("optimizer/vars (name=%s): %s" % (h["optimizer/vars"].attrs["name"], "; ".join(listing[:6]) +
                                                 ("; ... %d in all" % len(listing) if len(listing) > 6 else "")))
    model = keras.models.load_model(a.keras)
    opt = model.optimizer
    if opt is None:
        fail("load_model gave an uncompiled model")
    it = int(opt.iterations.numpy())
    if it != updates:
        fail("iterations %d, psrt's update count %d" % (it, updates))
    if it != step:
        fail("iterations %d, the checkpoint's step %d (one worker: they should agree)" % (it, step))
    if abs(float(opt.learning_rate.numpy()) - float(f32(hp["learning_rate"]))) > 0:
        fail("learning_rate %r, psrt's %s" % (float(opt.learning_rate.numpy()), hp["learning_rate"]))
    print("loaded: %s, iterations %d = step, learning_rate %g, %d variables" %
          (type(opt).__name__, it, float(opt.learning_rate.numpy()), len(opt.variables)))
    weights = model.trainable_weights
    if len(weights) != len(raw):
        fail("%d trainable weights, psrt %d" % (len(weights), len(raw)))
    kinds = keras_slots(hp)
    if len(opt.variables) != 2 + len(kinds) * len(weights):
        fail("optimizer has %d variables, want %d" % (len(opt.variables), 2 + len(kinds) * len(weights)))
    worst = 0.0
    for w, (name, value, slots) in zip(weights, raw):
        if w.numpy().tobytes() != value.tobytes():
            fail("weight %s is not psrt's %s" % (w.path, name))
        for kind, i, factor in kinds:
            got = slot_by_name(opt, w, kind).numpy()
            d = float(np.max(np.abs(got - factor * slots[i]))) if got.size else 0.0
            worst = max(worst, d)
            if d > 1e-6:
                fail("slot %s of %s differs from psrt's slot %d by %g" % (kind, w.path, i, d))
    print("slots: %d (%s per variable), max |keras - psrt| = %g" %
          (len(kinds) * len(weights), ", ".join(k for k, _, _ in kinds) or "none", worst))

    # 2. One step from the loaded state vs psrt's rule.
    shape = tuple(int(s) for s in a.input_shape.split(","))
    x = (read_idx(a.images, 64).astype(np.float32) * np.float32(a.scale)).reshape((-1,) + shape)
    y = read_idx(a.labels, 64).astype(np.int64)
    if any(isinstance(l, keras.layers.Dropout) for l in model.layers):
        fail("the checker needs a model without dropout (its masks are random)")
    with tf.GradientTape() as tape:
        loss = model.loss(y, model(x, training=True))
    grads = [g.numpy() for g in tape.gradient(loss, weights)]
    expected = [psrt_update(hp, value, g, slots, updates + 1) for (name, value, slots), g in zip(raw, grads)]
    model.train_on_batch(x, y)
    # For the C++ test, which applies psrt's own Optimizer to the same
    # gradients: each gradient and Keras' weight after the step.
    for i, (g, w) in enumerate(zip(grads, weights)):
        g.astype(np.float32).tofile(os.path.join(a.raw_dir, "grad%d.bin" % i))
        w.numpy().astype(np.float32).tofile(os.path.join(a.raw_dir, "keras_after%d.bin" % i))
    if int(opt.iterations.numpy()) != updates + 1:
        fail("iterations after one step: %d" % int(opt.iterations.numpy()))
    worst = max(float(np.max(np.abs(w.numpy() - e))) for w, e in zip(weights, expected))
    moved = max(float(np.max(np.abs(w.numpy() - v))) for w, (_, v, _) in zip(weights, raw))
    if worst > 1e-6:
        fail("after one train_on_batch the weights differ from psrt's update by %g" % worst)
    print("one train_on_batch: weights moved up to %g; max |keras - psrt's rule| = %g" % (moved, worst))

    # 3. A model whose optimizer was set by hand to psrt's state.
    hand = keras.models.load_model(a.keras, compile=False)
    lr = float(f32(hp["learning_rate"]))
    kind = hp["kind"]
    if kind in ("sgd", "momentum"):
        o = keras.optimizers.SGD(lr, momentum=float(hp.get("momentum", 0)), nesterov=hp.get("nesterov") == "1")
    elif kind == "adam":
        o = keras.optimizers.Adam(lr, beta_1=float(hp["beta1"]), beta_2=float(hp["beta2"]), epsilon=float(hp["epsilon"]))
    elif kind == "adamw":
        o = keras.optimizers.AdamW(lr, weight_decay=float(hp["weight_decay"]), beta_1=float(hp["beta1"]),
                                   beta_2=float(hp["beta2"]), epsilon=float(hp["epsilon"]))
    else:
        o = keras.optimizers.RMSprop(lr, rho=float(hp["rho"]), momentum=float(hp["momentum"]),
                                     epsilon=float(hp["epsilon"]), centered=hp["centered"] == "1")
    hand.compile(optimizer=o, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    o.build(hand.trainable_weights)
    o.iterations.assign(updates)
    for w, (name, value, slots) in zip(hand.trainable_weights, raw):
        for k, i, factor in kinds:
            slot_by_name(o, w, k).assign(factor * slots[i])
    hand.train_on_batch(x, y)
    worst = max(float(np.max(np.abs(h.numpy() - w.numpy()))) for h, w in zip(hand.trainable_weights, weights))
    if worst > 1e-7:
        fail("the hand-set Keras optimizer's step differs from the loaded one's by %g" % worst)
    print("hand-set Keras optimizer, same step: max |hand - loaded| = %g" % worst)
    print("\nOK")


if __name__ == "__main__":
    main()
