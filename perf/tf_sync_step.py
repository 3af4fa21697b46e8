"""TensorFlow reference: one task of the paper's synchronous replica microbenchmark (section 6.2,
Figure 6), as actorflow-scaling-task is one of actorflow's. actorflow-bench's scaling group runs
every task of the cluster in a network namespace of its own behind a shaped link
(perf/cluster_sim.hpp), the ps tasks first; this script is the same experiment built the TF 1.x
way (graph mode via tf.compat.v1, between-graph replication), extending
../shared/perf-ref/tf_null_step.py's null step to dense and sparse models.

usage: python tf_sync_step.py --job ps|worker --task I --ps-hosts H:P,... --worker-hosts H:P,...
           [--model scalar|dense|sparse] [--model-mb 100] [--rows 32] [--steps 100] [--warmup 10]
needs: tensorflow-cpu from PyPI (in a venv)

A ps task serves (one thread, as tf_null_step.py's). A worker builds the model with its variables
on the ps tasks: scalar, one float per ps task; dense, --model-mb MB of float32 split evenly over
the ps tasks; sparse, a --model-mb MB table of 64-float rows split by rows over them
(fixed_size_partitioner), of which each step looks up --rows random rows (embedding_lookup). Its
loss is half the sum of squares of what it read, computed on the worker, so that each step fetches
the parameters and sends back a gradient equal to them; SyncReplicasOptimizer (plain gradient
descent) aggregates every worker's gradient, the chief applying it. Every worker runs --warmup
plus --steps steps, one per global step; worker 0 prints
`step_ms_median=<ms> steps=<n>` over the timed steps, as actorflow-scaling-task does.
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--job", required=True, choices=["ps", "worker"])
    p.add_argument("--task", type=int, required=True)
    p.add_argument("--ps-hosts", required=True)
    p.add_argument("--worker-hosts", required=True)
    p.add_argument("--model", default="scalar", choices=["scalar", "dense", "sparse"])
    p.add_argument("--model-mb", type=float, default=100)
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    return p.parse_args()


def build(tf, a, num_ps, workers):
    """The loss, the training op and the ids placeholder (sparse) of worker a.task."""
    setter = tf.train.replica_device_setter(ps_tasks=num_ps, worker_device=f"/job:worker/task:{a.task}")
    ids = None
    with tf.device(setter):
        global_step = tf.train.get_or_create_global_step()
        parts = []
        if a.model in ("scalar", "dense"):
            n = 1 if a.model == "scalar" else max(1, int(a.model_mb * 1e6 / 4 / num_ps))
            for p in range(num_ps):
                with tf.device(f"/job:ps/task:{p}"):
                    v = tf.Variable(tf.fill([n], 0.5), name=f"{a.model}_{p}")
                parts.append(tf.nn.l2_loss(v))  # on the worker: the parameters travel to it
        else:
            rows = max(num_ps, int(a.model_mb * 1e6 / 4 / 64))
            table = tf.get_variable("table", [rows, 64], initializer=tf.constant_initializer(0.5),
                                    partitioner=tf.fixed_size_partitioner(num_ps))
            ids = tf.placeholder(tf.int64, [a.rows], name="ids")
            parts.append(tf.nn.l2_loss(tf.nn.embedding_lookup(table, ids)))
        loss = tf.add_n(parts)
        opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(1e-6),
                                             replicas_to_aggregate=workers, total_num_replicas=workers)
        train = opt.minimize(loss, global_step=global_step)
    return opt, train, ids


def main():
    a = parse()
    import numpy as np
    import tensorflow.compat.v1 as tf
    tf.disable_eager_execution()
    ps_hosts, worker_hosts = a.ps_hosts.split(","), a.worker_hosts.split(",")
    cluster = tf.train.ClusterSpec({"ps": ps_hosts, "worker": worker_hosts})
    threads = 1 if a.job == "ps" else 2
    server = tf.distribute.Server(cluster, job_name=a.job, task_index=a.task,
                                  config=tf.ConfigProto(intra_op_parallelism_threads=threads,
                                                        inter_op_parallelism_threads=threads))
    if a.job == "ps":
        print(f"/job:ps/task:{a.task} serving", flush=True)
        server.join()
        return 0
    chief = a.task == 0
    opt, train, ids = build(tf, a, len(ps_hosts), len(worker_hosts))
    config = tf.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{a.task}"])
    if not chief:
        # MonitoredTrainingSession looks for the chief's initialization every 30 s; look more often.
        with tf.Session(server.target, config=config) as plain:
            uninitialized = tf.report_uninitialized_variables(tf.global_variables())
            while len(plain.run(uninitialized)):
                time.sleep(0.1)
    rng = np.random.default_rng(a.task)
    rows = None
    if ids is not None:
        rows = max(len(ps_hosts), int(a.model_mb * 1e6 / 4 / 64))
    times = []
    with tf.train.MonitoredTrainingSession(master=server.target, is_chief=chief, config=config,
                                           hooks=[opt.make_session_run_hook(chief)],
                                           save_checkpoint_secs=None, save_summaries_steps=None,
                                           save_summaries_secs=None, log_step_count_steps=None) as sess:
        for step in range(a.warmup + a.steps):
            feed = {ids: rng.integers(0, rows, a.rows)} if ids is not None else None
            t0 = time.perf_counter()
            sess.run(train, feed)
            if step >= a.warmup:
                times.append(time.perf_counter() - t0)
    print(f"/job:worker/task:{a.task} step_ms_median={statistics.median(times) * 1000:.3f} "
          f"steps={len(times)} tensorflow={tf.__version__}", flush=True)
    # The session's queue runners may wait on; the task is done.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
