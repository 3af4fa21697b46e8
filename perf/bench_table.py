#!/usr/bin/env python3
"""Runs the actorflow-bench groups the README cites, with their PyTorch and
TensorFlow references in the same run, and writes a dated markdown table: the
machine (CPU model, cores, flags), the commit, and each figure beside its
references and the ratios. The README's performance table is this output.

usage: python3 perf/bench_table.py [--build build] [--reference-dir DIR]
           [--tf-python PY] [--rounds N] [--groups mlp,cnn,control,dist]
           [--out FILE]

References (../shared/perf-ref's README has the set-up):
- PyTorch: Debian's python3-torch with libopenblas0-openmp, run by
  /usr/bin/python3 (the bench runs torch_fmnist.py beside mlp and cnn).
- TensorFlow: a Python that imports tensorflow (--tf-python, else
  $ACTORFLOW_TF_PYTHON): the bench runs tf_while.py and tf_lstm_lm.py in the
  control group; this script runs tf_fmnist.py after the mlp and cnn groups
  and tf_null_step.py after the dist group, in the same round.
Every reference runs in this script's environment (the caller's): neither
this script nor the bench passes its own settings on to them.

Each round runs every group once; a cell gives the range over the rounds, and
a ratio is taken within each round (actorflow and its reference measured in
the same minutes), then given as a range too. After the mlp and cnn groups
the script also runs torch_fmnist.py by hand, to check the bench's PyTorch
rows against it (the issue's 10% rule).
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# (label, actorflow key, PyTorch key, TensorFlow key, unit, better, group, note)
ROWS = [
    ("MLP 784-512-512-10 training step, batch 128, Adam", "mlp_step_ms", "torch_mlp_step_ms",
     "tf_mlp_step_ms", "ms", "lower", "mlp", ""),
    ("CNN (conv5x5x32-pool-conv5x5x64-pool-fc1024-fc10) step, batch 128, Adam", "cnn_step_ms",
     "torch_cnn_step_ms", "tf_cnn_step_ms", "ms", "lower", "cnn", ""),
    ("while-loop iteration, scalar add body (100,000 iterations)", "while_us_per_iteration", None,
     "tf_while_us_per_iteration", "µs", "lower", "control", "TensorFlow in graph mode"),
    ("while-loop iteration, tanh(x@w+1)*0.5 on 64x64", "while_us_per_iteration_4ops", None,
     "tf_while_us_per_iteration_4ops", "µs", "lower", "control", "TensorFlow in graph mode"),
    ("LSTM language model on fortunes, sampled softmax: training words/s", "lstm_lm_words_per_s",
     None, "tf_lstm_lm_words_per_s", "words/s", "higher", "control",
     "actorflow over 200 steps, TensorFlow over one epoch"),
    ("null step (TF paper §6.2), 1 worker, 2 ps tasks, loopback", "null_step_ms_1w_2ps", None,
     "tf_null_step_ms_1w_2ps", "ms", "lower", "dist", "TensorFlow: gRPC servers, graph mode"),
    ("null step, 4 workers, 2 ps tasks, loopback", "null_step_ms_4w_2ps", None,
     "tf_null_step_ms_4w_2ps", "ms", "lower", "dist", "TensorFlow: gRPC servers, graph mode"),
]

FLAGS = ["avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8"]


def cpu_facts():
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model is None:
                    model = value.strip()
                if key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    return model or platform.processor() or "unknown", os.cpu_count(), [f for f in FLAGS if f in flags], [f for f in FLAGS if f not in flags]


def git(*args):
    try:
        return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def run(argv, env=None, timeout=1800):
    """stdout of argv, or None when it fails; in the caller's environment
    (plus `env`)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"  {argv[0]}: {e}", file=sys.stderr)
        return None
    if p.returncode != 0:
        print(f"  {' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()[-400:]}",
              file=sys.stderr)
        return None
    return p.stdout


def field(text, name):
    m = re.search(name + r"=([0-9.]+)", text or "")
    return float(m.group(1)) if m else None


def python_version(python, module):
    out = run([python, "-c", f"import {module}; print({module}.__version__)"])
    return out.strip() if out else None


def load_average():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def bench_group(args, group):
    env = {}
    if args.reference_dir:
        env["ACTORFLOW_PERF_REF"] = args.reference_dir
    if args.tf_python:
        env["ACTORFLOW_TF_PYTHON"] = args.tf_python
    out = run([os.path.join(args.build, "actorflow-bench"), "--only", group, "--json"], env)
    try:
        return json.loads(out) if out else {}
    except json.JSONDecodeError:
        return {}


def references_after(args, group, figures):
    """The references the bench does not run itself, right after its group."""
    ref = args.reference_dir
    if not ref:
        return
    if group in ("mlp", "cnn"):
        steps = {"mlp": "200", "cnn": "30"}[group]
        if args.tf_python:
            v = field(run([args.tf_python, os.path.join(ref, "tf_fmnist.py"), group, steps, "128"]),
                      "step_ms")
            if v is not None:
                figures[f"tf_{group}_step_ms"] = v
        # PyTorch by hand, as its users run it: the check of the bench's row.
        v = field(run(["/usr/bin/python3", os.path.join(ref, "torch_fmnist.py"), group, steps,
                       "128"]), "step_ms")
        if v is not None:
            figures[f"torch_{group}_step_ms_by_hand"] = v
    if group == "dist" and args.tf_python:
        for workers in (1, 4):
            v = field(run([args.tf_python, os.path.join(ref, "tf_null_step.py"), str(workers), "2",
                           "2000"]), "null_step_ms")
            if v is not None:
                figures[f"tf_null_step_ms_{workers}w_2ps"] = v


def fmt(v):
    if v is None:
        return "—"
    if v >= 1000:
        return f"{v / 1000:.1f}K"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def span(values, show=fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    lo, hi = min(values), max(values)
    return show(lo) if show(lo) == show(hi) else f"{show(lo)}–{show(hi)}"


def ratio(x):
    return f"{x:.2f}x"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    parser.add_argument("--reference-dir", default=os.environ.get("ACTORFLOW_PERF_REF", ""))
    parser.add_argument("--tf-python", default=os.environ.get("ACTORFLOW_TF_PYTHON", ""))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--groups", default="mlp,cnn,control,dist")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    groups = [g for g in args.groups.split(",") if g]

    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = load_average()
    rounds = []
    for r in range(args.rounds):
        figures = {}
        for group in groups:
            t0 = time.time()
            print(f"round {r + 1}/{args.rounds}: {group}", file=sys.stderr)
            figures.update(bench_group(args, group))
            references_after(args, group, figures)
            print(f"  {time.time() - t0:.0f} s", file=sys.stderr)
        rounds.append(figures)
    load_after = load_average()

    model, cores, has, lacks = cpu_facts()
    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    changed = [line.split(maxsplit=1)[-1] for line in git("status", "--porcelain", "--untracked-files=no").split("\n")
               if line.strip()]
    if changed:
        commit += f" (with uncommitted changes to {', '.join(changed[:5])}" + (
            ", ..." if len(changed) > 5 else "") + ")"
    torch_version = python_version("/usr/bin/python3", "torch")
    tf_version = python_version(args.tf_python, "tensorflow") if args.tf_python else None
    command = "python3 perf/bench_table.py" + "".join(
        f" {k} {v}" for k, v in (("--rounds", str(args.rounds)), ("--groups", args.groups),
                                 ("--reference-dir", args.reference_dir and "../shared/perf-ref"),
                                 ("--tf-python", args.tf_python and "PY")) if v)

    lines = [
        f"# actorflow beside PyTorch and TensorFlow, {started:%Y-%m-%d}",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC",
        f"- machine: {model}, {cores} cores; flags: {' '.join(has) or 'none of ' + ' '.join(FLAGS)}"
        + (f"; without {' '.join(lacks)}" if lacks else ""),
        f"- commit: {commit}",
        f"- load average (1, 5, 15 min) before: {load_before}; after: {load_after}",
        f"- PyTorch {torch_version or 'not found'} (/usr/bin/python3); TensorFlow "
        f"{tf_version or 'not found'}",
        f"- {args.rounds} rounds of the groups {', '.join(groups)}; a cell is the range over the "
        "rounds; a ratio is actorflow's figure over the reference's of the same round",
        f"- reproduce: `{command}` (where PY is a Python that imports tensorflow)",
        "",
        "| what | unit | actorflow | PyTorch | TensorFlow | actorflow / PyTorch | "
        "actorflow / TensorFlow |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    def got(key):
        return [f.get(key) for f in rounds] if key else []

    for label, ours, torch_key, tf_key, unit, better, group, note in ROWS:
        if group not in groups:
            continue
        cells = [span(got(ours)), span(got(torch_key)), span(got(tf_key))]
        ratios = []
        for key in (torch_key, tf_key):
            per_round = [f[ours] / f[key] for f in rounds if key and f.get(ours) and f.get(key)]
            ratios.append(span(per_round, ratio))
        what = label + (f" ({better} is better" + (f"; {note})" if note else ")"))
        lines.append(f"| {what} | {unit} | " + " | ".join(cells + ratios) + " |")

    checks = []
    for model_name in ("mlp", "cnn"):
        bench_key, hand_key = f"torch_{model_name}_step_ms", f"torch_{model_name}_step_ms_by_hand"
        per_round = [f[bench_key] / f[hand_key] for f in rounds
                     if f.get(bench_key) and f.get(hand_key)]
        if per_round:
            checks.append(f"| PyTorch {model_name} step: the bench's row / torch_fmnist.py by hand "
                          f"| {span(got(bench_key))} | {span(got(hand_key))} | "
                          f"{span(per_round, ratio)} |")
    if checks:
        lines += ["", "The bench's PyTorch rows beside the same script run by hand right after "
                  "(same round):", "", "| check | bench (ms) | by hand (ms) | ratio |",
                  "| --- | --- | --- | --- |"] + checks

    text = "\n".join(lines) + "\n"
    out = args.out or f"anchors-{started:%Y-%m-%d}.md"
    with open(out, "w") as f:
        f.write(text)
    raw = os.path.splitext(out)[0] + ".json"
    with open(raw, "w") as f:
        json.dump({"date": started.isoformat(), "machine": model, "cores": cores, "flags": has,
                   "commit": commit, "rounds": rounds}, f, indent=1)
    print(text)
    print(f"written: {out} (every figure of every round: {raw})", file=sys.stderr)


if __name__ == "__main__":
    main()
