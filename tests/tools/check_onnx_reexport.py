"""Checks an imported ONNX model exported back by psrt (//chief:export
--format=onnx of a model.onnx job) with the real readers: onnx's checker
accepts it; it has the original file's graph (the same nodes, inputs,
outputs and initializer names); its trained initializers differ from the
original's; and ONNX Runtime's accuracy on the test examples equals psrt's
own evaluation of the same weights (up to a few near-ties). Exits
non-zero, saying why, on a mismatch; prints OK last otherwise.

usage: check_onnx_reexport.py --original M0 --exported M --images I.gz
       --labels L.gz --scale S --examples N --psrt_accuracy A
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_export import fail, read_idx  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for flag in ("--original", "--exported", "--images", "--labels"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--scale", type=float, required=True)
    ap.add_argument("--examples", type=int, required=True)
    ap.add_argument("--psrt_accuracy", type=float, required=True)
    args = ap.parse_args()
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    original, exported = onnx.load(args.original), onnx.load(args.exported)
    onnx.checker.check_model(exported)
    if [n.op_type for n in original.graph.node] != [n.op_type for n in exported.graph.node]:
        fail("the exported graph's nodes differ from the original's")
    if [i.name for i in original.graph.input] != [i.name for i in exported.graph.input]:
        fail("the inputs differ")
    if [o.name for o in original.graph.output] != [o.name for o in exported.graph.output]:
        fail("the outputs differ")
    before = {t.name: numpy_helper.to_array(t) for t in original.graph.initializer}
    after = {t.name: numpy_helper.to_array(t) for t in exported.graph.initializer}
    missing = set(before) - set(after)
    if missing:
        fail(f"initializers lost: {sorted(missing)[:5]}")
    trained = [k for k, v in before.items() if v.dtype == np.float32 and not np.array_equal(v, after[k])]
    print(f"{len(trained)} of {sum(v.dtype == np.float32 for v in before.values())} float initializers trained")
    if not trained:
        fail("no initializer holds trained values")

    images = read_idx(args.images, args.examples).astype(np.float32) * args.scale
    labels = read_idx(args.labels, args.examples).astype(np.int64)
    session = ort.InferenceSession(args.exported, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    shape = session.get_inputs()[0].shape
    x = images.reshape((len(images),) + tuple(int(d) for d in shape[1:]))
    correct = 0
    for s in range(0, len(x), 500):
        logits = session.run(None, {name: x[s:s + 500]})[0]
        correct += int((logits.argmax(1) == labels[s:s + 500]).sum())
    accuracy = correct / len(x)
    print(f"ONNX Runtime accuracy {accuracy:.6f} on {len(x)} examples, psrt {args.psrt_accuracy:.6f}")
    if abs(accuracy - args.psrt_accuracy) > 0.002:
        fail("ONNX Runtime's accuracy differs from psrt's evaluation")
    # Twice the same: Dropout is off.
    again = session.run(None, {name: x[:64]})[0]
    if not np.array_equal(again, session.run(None, {name: x[:64]})[0]):
        fail("two runs of the same batch differ (dropout still on?)")
    print("OK")


if __name__ == "__main__":
    main()
