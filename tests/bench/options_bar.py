#!/usr/bin/env python3
"""Each training option trained to the bar, through the launcher.

Issue #25 asks that every training option a TensorFlow user expects (AdamW,
RMSprop, the three clippings, label smoothing, L2 regularisation, more
metrics, early stopping, warm start) be shown by one job trained to the
published bar through the launcher, and each applied under every strategy.
This runs, for each option, the Fashion-MNIST MLP example
(examples/fashion_mnist_mlp.pbtxt) with only that option changed, under a
strategy picked so that the options together cover the parameter-server
strategy (ASYNC and SYNC), multi_worker_mirrored and mirrored { devices: 2 },
through `//deploy:local_cluster` (real chief, PS and worker processes), and
prints one line per run: the test accuracy of the final checkpoint against
the bar (0.8833, the published MLP figure), steps, wall time.

    bazel build -c opt //deploy:local_cluster
    python3 tests/bench/options_bar.py [--only=adamw,rmsprop] [--out=DIR]
    python3 tests/bench/options_bar.py --matrix [--epochs=1]

--matrix runs every option under every strategy instead, each for --epochs
(default 1) with no bar: it shows each combination trains to its end, with
its accuracy after that many epochs beside the plain job's under the same
strategy.

Exit status 0 when every run ended at or above its bar, 1 otherwise (a
measurement, not a CI test: about 40-90 s per run on a 2-core machine).
Python only edits job files and reads summaries; the training is psrt's.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

MLP_BAR = 0.8833  # the published table's MLP figure (Fashion-MNIST)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE_JOB = os.path.join(ROOT, "examples", "fashion_mnist_mlp.pbtxt")


def replace_once(text, old, new):
    if text.count(old) != 1:
        raise SystemExit(f"options_bar: the base job does not hold exactly one {old!r}; update this script")
    return text.replace(old, new)


# Strategies: each edits the job the way the examples of that strategy do.
def ps_async(job):
    return job  # the MLP example's own: 2 PS, 2 workers, ASYNC


def ps_sync(job):
    return replace_once(job, "consistency { mode: ASYNC }", "consistency { mode: SYNC }")


def multi_worker_mirrored(job):
    job = replace_once(job, "consistency { mode: ASYNC }\n", "")
    return replace_once(job, 'name: "fashion_mnist_mlp"\n',
                        'name: "fashion_mnist_mlp"\nstrategy { multi_worker_mirrored {} }\n')


def mirrored_devices(job):
    job = replace_once(job, "consistency { mode: ASYNC }\n", "")
    return replace_once(job, 'name: "fashion_mnist_mlp"\n', 'name: "fashion_mnist_mlp"\nstrategy { mirrored { devices: 2 } }\n')


STRATEGIES = {
    "ps_async": ps_async,
    "ps_sync": ps_sync,
    "multi_worker_mirrored": multi_worker_mirrored,
    "mirrored_devices_2": mirrored_devices,
}


def optimizer_field(field):
    return lambda job: replace_once(job, "  schedule { kind: COSINE }", f"  {field}\n  schedule {{ kind: COSINE }}")


def each_dense(field):
    def edit(job):
        for units in ("256", "128", "10"):
            old = f"layer {{ dense {{ units: {units}"
            job = replace_once(job, old, f"layer {{ {field} dense {{ units: {units}")
        return job
    return edit


# (name, strategy, edit of the job text, what it shows)
CASES = [
    ("adamw", "ps_async",
     lambda j: replace_once(j, "adam { learning_rate: 0.001 }", "adamw { learning_rate: 0.001 }"),
     "AdamW, Keras' default weight_decay 0.004"),
    ("rmsprop", "multi_worker_mirrored",
     lambda j: replace_once(j, "adam { learning_rate: 0.001 }", "rmsprop { learning_rate: 0.001 }"),
     "RMSprop, Keras' defaults"),
    ("clipnorm", "ps_sync", optimizer_field("clipnorm: 1.0"), "each gradient's L2 norm <= 1"),
    ("clipvalue", "mirrored_devices_2", optimizer_field("clipvalue: 0.5"), "each element in [-0.5, 0.5]"),
    ("global_clipnorm", "ps_async", optimizer_field("global_clipnorm: 1.0"), "the step's global norm <= 1"),
    ("label_smoothing", "multi_worker_mirrored",
     lambda j: replace_once(j, "loss { kind: SOFTMAX_CROSS_ENTROPY }",
                            "loss { kind: SOFTMAX_CROSS_ENTROPY label_smoothing: 0.1 }"),
     "label_smoothing 0.1"),
    ("l2_regularizer", "ps_sync", each_dense("kernel_regularizer { l2: 0.00001 }"), "l2 1e-5 on every kernel"),
    ("metrics", "mirrored_devices_2",
     lambda j: replace_once(j, '  metric: "accuracy"\n', '  metric: "accuracy"\n  metric: "top_3_accuracy"\n'),
     "top_3_accuracy beside accuracy"),
    ("early_stopping", "ps_async",
     lambda j: replace_once(j, "eval { every_steps: 2000 }",
                            'eval { every_steps: 500 early_stopping { monitor: "accuracy" min_delta: 0.001 patience: 4 } }'),
     "Keras' EarlyStopping, patience 4 over evaluations every 500 steps"),
    # Last: warm-starts from the first case's checkpoint and trains 3 epochs.
    ("warm_start", "multi_worker_mirrored", None, "3 epochs from adamw's final weights (every variable)"),
]


def run_case(name, strategy, job_text, run_dir, local_cluster):
    os.makedirs(run_dir, exist_ok=True)
    job_path = os.path.join(run_dir, "job.pbtxt")
    with open(job_path, "w") as f:
        f.write(job_text)
    log_path = os.path.join(run_dir, "launcher.log")
    start = time.time()
    with open(log_path, "w") as log:
        rc = subprocess.call([local_cluster, f"--job={job_path}", f"--run_dir={run_dir}/run"],
                             stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    seconds = time.time() - start
    summary_path = os.path.join(run_dir, "run", "summary.json")
    summary = {}
    if os.path.exists(summary_path):
        with open(summary_path) as f:
            summary = json.load(f)
    return rc, seconds, summary, log_path


def run_matrix(base, only, args):
    short = replace_once(base, "epochs: 15", f"epochs: {args.epochs}")
    cases = [("plain", None, lambda j: j, "the example as it is")]
    cases += [c for c in CASES if c[0] not in ("warm_start", "early_stopping") and (not only or c[0] in only)]
    print(f"# every option under every strategy, {args.epochs} epoch(s), {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")
    print("| option | " + " | ".join(STRATEGIES) + " |")
    print("|---|" + "---|" * len(STRATEGIES))
    failed = []
    for name, _, edit, _ in cases:
        cells = []
        for strategy, apply_strategy in STRATEGIES.items():
            rc, _, summary, log_path = run_case(name, strategy, apply_strategy(edit(short)),
                                                os.path.join(args.out, "matrix", f"{name}-{strategy}"),
                                                args.local_cluster)
            accuracy = summary.get("metrics", {}).get("accuracy")
            if rc != 0 or accuracy is None:
                failed.append(f"{name} under {strategy}")
                cells.append(f"FAILED ({log_path})")
            else:
                cells.append(f"{accuracy:.4f}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--out", default="/tmp/psrt-options-bar", help="run directories go here")
    parser.add_argument("--local_cluster", default=os.path.join(ROOT, "bazel-bin", "deploy", "local_cluster"))
    parser.add_argument("--matrix", action="store_true", help="every option under every strategy, no bar")
    parser.add_argument("--epochs", type=int, default=1, help="with --matrix: epochs per run")
    args = parser.parse_args()
    if not os.access(args.local_cluster, os.X_OK):
        raise SystemExit(f"options_bar: {args.local_cluster} is not built: bazel build -c opt //deploy:local_cluster")
    only = set(filter(None, args.only.split(",")))
    known = {c[0] for c in CASES}
    if only - known:
        raise SystemExit(f"options_bar: unknown case(s) {sorted(only - known)}; known: {sorted(known)}")
    with open(BASE_JOB) as f:
        base = f.read()
    if args.matrix:
        return run_matrix(base, only, args)

    print(f"# options to the bar: MLP bar {MLP_BAR}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print("| option | strategy | test accuracy | bar | steps | wall s | what |")
    print("|---|---|---|---|---|---|---|")
    failed = []
    for name, strategy, edit, what in CASES:
        if only and name not in only:
            continue
        if name == "warm_start":
            source = os.path.join(args.out, "adamw", "run", "checkpoints")
            if not os.path.isdir(source):
                print(f"| {name} | {strategy} | skipped: no {source} (run adamw first) | | | | |")
                continue
            job = replace_once(base, "epochs: 15", "epochs: 3")
            job = replace_once(job, "adam { learning_rate: 0.001 }", "adamw { learning_rate: 0.0002 }")
            job += f'warm_start {{ ckpt_to_initialize_from: "{source}" }}\n'
        else:
            job = edit(base)
        job = STRATEGIES[strategy](job)
        rc, seconds, summary, log_path = run_case(name, strategy, job, os.path.join(args.out, name),
                                                  args.local_cluster)
        accuracy = summary.get("metrics", {}).get("accuracy")
        steps = summary.get("steps", "?")
        if summary.get("stopped_early_at_step", -1) not in (-1, None):
            steps = f"{steps} (stopped early)"
        ok = rc == 0 and accuracy is not None and accuracy >= MLP_BAR
        shown = f"{accuracy:.4f}" if accuracy is not None else f"none (exit {rc}, {log_path})"
        print(f"| {name} | {strategy} | {shown}{'' if ok else ' BELOW'} | {MLP_BAR} | {steps} | {seconds:.0f} | {what} |",
              flush=True)
        if not ok:
            failed.append(name)
    if failed:
        print(f"below the bar or failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
