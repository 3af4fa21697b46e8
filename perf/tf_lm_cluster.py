"""TensorFlow reference: the paper's LSTM language model across parameter servers (§4.2, §6.4), on
loopback gRPC servers, built the TF 1.x way (between-graph replication, graph mode via tf.compat.v1).

usage: python tf_lm_cluster.py [--workers W] [--ps N] [--sync [--backup-workers B]] [--full-softmax]
           [--epochs E | --max-steps S] [--max-train-tokens T] [--max-valid-tokens V] [--no-eval]
           [--vocab 10000] [--embedding 256] [--hidden 256] [--batch 32] [--warmup 5] [--timeout 1800]
       (defaults: 1 worker, 2 ps, asynchronous, sampled softmax, 1 epoch)
needs: tensorflow-cpu from PyPI (in a venv), Debian's `fortunes` package

The process started only supervises: it starts the N ps tasks and the W worker tasks as its children
on free loopback ports, waits at most --timeout seconds for the workers, kills every child when it
leaves (done, error, Ctrl-C, SIGTERM, timeout; the kernel kills them should it die otherwise), and
prints the result. Each worker task builds the same graph and runs its own training loop on its own
share of the corpus; worker 0, the chief, initializes the variables, runs SyncReplicasOptimizer's
queue runner with --sync, and evaluates at the end.

Corpus, model and training settings as tf_lstm_lm.py: the fortunes split into training and
validation fortunes, the --vocab most frequent training tokens plus <unk>; embedding 256, one LSTM
layer of 256 (Keras's LSTM: its parameters, initializers, gate order and forget-gate bias of 1),
truncated BPTT of 35 steps over 32 streams, sampled softmax with 512 log-uniform candidates (or the
full softmax), Adam 1e-3 with the gradients' global norm clipped at 5.
Placement: tf.compat.v1.train.replica_device_setter puts the variables on the ps tasks (whole
variables round-robin) and the computation on the worker; the embedding and the softmax weights and
biases are each split over all ps tasks (fixed_size_partitioner), the embedding read with
tf.nn.embedding_lookup and the sampled softmax over the shards (the gathers run on the ps tasks, so
only the rows needed travel); the full softmax concatenates the shards at the worker.
Training: asynchronous by default, each worker applying its own updates; --sync aggregates
W - B workers' gradients per update (SyncReplicasOptimizer, B backup workers). Worker w of W trains
on tokens [w*n/W, (w+1)*n/W) of the training set, its own 32 streams, carrying its LSTM state
across segments (zero at the start of each pass over its share). As TF 1.x training did
(StopAtStepHook), the run ends at a global step: an epoch is as many steps per worker as the
smallest share holds segments, i.e. that many updates with --sync and W times as many without;
--max-steps gives the global step to stop at instead.

Measures: words_per_s, the whole cluster's training words per second. All workers start together
(a barrier once the sessions are up), each runs --warmup (default 5) untimed steps, then its clock
starts; the figure is all workers' timed words (32 x 35 per worker step, the dropped gradients' too
with --sync) over the time from the first worker's clock start to the last worker's last step.
valid_ppl: the chief's validation perplexity with the full softmax, state carried across segments
from zero (nan with --no-eval); after one epoch it depends much on the random seed (one worker,
sampled softmax: 315 to 527 over seeds 0 to 3; tf_lstm_lm.py's runs fall in that range).
steps: the global step at the end, the number of updates applied.
prints one line: words_per_s=<x> valid_ppl=<y> steps=<n> workers=<W> ps=<N> softmax=<sampled|full>
(everything else goes to stderr)

How it differs from tf_lstm_lm.py: graph mode and sessions instead of tf.function; the LSTM is
written with graph ops, its recurrence a while loop (tf.scan) as Keras runs it, every time step's
input projection done beforehand in one matmul, and the recurrent kernel read once per training
step at the worker, as TF 1.x's dynamic_rnn did (its caching device). tf.compat.v1's LSTMCell
needs Keras 2, which TensorFlow 2.21 lacks; Keras 3's LSTM layer does run in a v1 graph, but it
reads its kernels inside the loop, from their ps task at each of the 35 time steps (which made
one worker with 2 ps train at 0.55x the words/s on a 2-core machine). Also:
tf.compat.v1.train.AdamOptimizer (with Keras's epsilon) and tf.clip_by_global_norm; the LSTM
state goes in and out through feeds as the TF 1.x PTB model did; the vocabulary comes from the
whole training set even when --max-train-tokens cuts it; the ps tasks run with one thread each,
as in tf_null_step.py, the workers with two, as tf_lstm_lm.py.
"""
import argparse, collections, glob, json, os, re, signal, socket, subprocess, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

STEPS, SAMPLES, LR, CLIP = 35, 512, 1e-3, 5.0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--ps", type=int, default=2)
    p.add_argument("--sync", action="store_true", help="SyncReplicasOptimizer instead of asynchronous updates")
    p.add_argument("--backup-workers", type=int, default=0, help="with --sync: updates aggregate W - B workers")
    p.add_argument("--full-softmax", action="store_true")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, help="the global step to stop at, instead of --epochs")
    p.add_argument("--max-train-tokens", type=int)
    p.add_argument("--max-valid-tokens", type=int)
    p.add_argument("--no-eval", action="store_true")
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--embedding", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=32, help="streams per worker")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per worker")
    p.add_argument("--timeout", type=float, default=1800, help="seconds for the whole run")
    # How the supervisor starts its children.
    p.add_argument("--role", choices=["ps", "worker"], help=argparse.SUPPRESS)
    p.add_argument("--task", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--cluster", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.workers < 1 or a.ps < 1 or not 0 <= a.backup_workers < a.workers:
        p.error("need workers >= 1, ps >= 1 and 0 <= backup-workers < workers")
    if a.backup_workers and not a.sync:
        p.error("--backup-workers needs --sync")
    return a


def log(*words):
    print(*words, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- corpus (as tf_lstm_lm.py)

def fortunes():
    texts = []
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if path.endswith((".dat", ".u8")) or os.path.isdir(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            texts += [t for t in re.split(r"(?m)^%\n", f.read()) if t.strip()]  # a line holding % ends a fortune
    return texts


def tokens(text):
    return re.findall(r"[a-z0-9']+|[^\sa-z0-9']", text.lower()) + ["<eos>"]


def corpus(vocab_size):
    import numpy as np
    docs = [tokens(t) for t in fortunes()]
    train = [w for i, d in enumerate(docs) if i % 10 != 9 for w in d]
    valid = [w for i, d in enumerate(docs) if i % 10 == 9 for w in d]
    counts = collections.Counter(train)
    order = {w: i for i, w in enumerate(dict.fromkeys(train))}
    vocab = sorted(counts, key=lambda w: (-counts[w], order[w]))[:vocab_size]
    index = {w: i for i, w in enumerate(vocab)}
    unk = len(vocab)
    ids = lambda ws: np.array([index.get(w, unk) for w in ws], dtype=np.int64)
    return ids(train), ids(valid), len(vocab) + 1


def segments(ids, batch):
    """The (inputs, targets) segments of `ids` cut into `batch` streams, [batch, STEPS] each."""
    n = (len(ids) - 1) // batch
    x = ids[:n * batch].reshape(batch, n)
    y = ids[1:n * batch + 1].reshape(batch, n)
    return [(x[:, s:s + STEPS], y[:, s:s + STEPS]) for s in range(0, n - STEPS + 1, STEPS)]


# ---------------------------------------------------------------- supervisor

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_setup():
    # Runs in each task before exec. The supervisor alone answers Ctrl-C (it kills the tasks), and
    # the kernel kills the task should the supervisor die in any other way: no task outlives a run.
    import ctypes
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def supervise(a, argv):
    spec = {"ps": [f"localhost:{free_port()}" for _ in range(a.ps)],
            "worker": [f"localhost:{free_port()}" for _ in range(a.workers)]}
    start = lambda role, task, out: subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), *argv, "--role", role, "--task", str(task),
         "--cluster", json.dumps(spec)], stdin=subprocess.DEVNULL, stdout=out, preexec_fn=child_setup)
    # SIGTERM leaves through the finally below, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("tf_lm_cluster: terminated"))
    children, t_start = [], time.monotonic()
    try:
        children += [start("ps", i, subprocess.DEVNULL) for i in range(a.ps)]
        workers = [start("worker", w, subprocess.PIPE) for w in range(a.workers)]
        children += workers
        # Each worker prints one JSON line when it is done; poll so that Ctrl-C and the timeout act
        # at once, and so that a task that fails ends the run (a ps task never ends by itself).
        while any(w.poll() is None for w in workers):
            for i, c in enumerate(children):
                if c.poll() is not None and (c.returncode or i < a.ps):
                    raise SystemExit(f"tf_lm_cluster: task {i} exited with status {c.returncode}")
            if time.monotonic() - t_start > a.timeout:
                raise SystemExit(f"tf_lm_cluster: timed out after {a.timeout:.0f} s")
            time.sleep(0.1)
        if any(w.returncode for w in workers):
            raise SystemExit(f"tf_lm_cluster: a worker exited with status {max(w.returncode for w in workers)}")
        results = [json.loads(w.stdout.read().decode().strip().splitlines()[-1]) for w in workers]
    finally:
        for c in children:
            c.kill()
        for c in children:
            try:
                c.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log(f"tf_lm_cluster: task {c.pid} did not exit")
    words = sum(r["words"] for r in results)
    seconds = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    chief = results[0]
    log(f"tf_lm_cluster: steps per worker {[r['steps'] for r in results]}, {seconds:.1f} s timed, "
        f"{time.monotonic() - t_start:.1f} s in all")
    print(f"words_per_s={words / seconds:.0f} valid_ppl={chief['valid_ppl']:.1f} steps={chief['global_step']} "
          f"workers={a.workers} ps={a.ps} softmax={'full' if a.full_softmax else 'sampled'}", flush=True)


# ---------------------------------------------------------------- tasks

def server(tf, a, role, task):
    # Thread pools are the server's: one thread each for the ps tasks (as tf_null_step.py), two for
    # the workers (as tf_lstm_lm.py).
    threads = 1 if role == "ps" else 2
    return tf.distribute.Server(tf.train.ClusterSpec(json.loads(a.cluster)), job_name=role, task_index=task,
                                config=tf.ConfigProto(intra_op_parallelism_threads=threads,
                                                      inter_op_parallelism_threads=threads))


def build(tf, a, vocab):
    """The model and training graph of worker a.task; returns its tensors by name."""
    import numpy as np
    E, H, B = a.embedding, a.hidden, a.batch
    m = argparse.Namespace()
    setter = tf.train.replica_device_setter(ps_tasks=a.ps, worker_device=f"/job:worker/task:{a.task}")
    with tf.device(setter):
        parts = tf.fixed_size_partitioner(a.ps)
        uniform = tf.random_uniform_initializer(-0.05, 0.05)  # Keras's Embedding; the reference's softmax_w
        embedding = tf.get_variable("embedding", [vocab, E], initializer=uniform, partitioner=parts)
        softmax_w = tf.get_variable("softmax_w", [vocab, H], initializer=uniform, partitioner=parts)
        softmax_b = tf.get_variable("softmax_b", [vocab], initializer=tf.zeros_initializer(), partitioner=parts)
        # Keras's LSTM: kernel Glorot-uniform, recurrent kernel orthogonal, bias 0 but 1 for the
        # forget gate (unit_forget_bias); gates in the order i, f, g, o.
        kernel = tf.get_variable("lstm/kernel", [E, 4 * H], initializer=tf.glorot_uniform_initializer())
        recurrent = tf.get_variable("lstm/recurrent_kernel", [H, 4 * H], initializer=tf.orthogonal_initializer())
        bias = tf.get_variable("lstm/bias", initializer=np.repeat(np.float32([0, 1, 0, 0]), H))
        global_step = tf.train.get_or_create_global_step()
        # Counters on the ps tasks through which the workers meet: all start training together, and
        # the chief waits for every worker to finish before evaluating.
        m.ready = tf.get_variable("workers_ready", [], tf.int32, tf.zeros_initializer(), trainable=False)
        m.done = tf.get_variable("workers_done", [], tf.int32, tf.zeros_initializer(), trainable=False)
        m.ready_add, m.done_add = m.ready.assign_add(1), m.done.assign_add(1)

        m.x = tf.placeholder(tf.int64, [B, STEPS])
        m.y = tf.placeholder(tf.int64, [B, STEPS])
        m.h0 = tf.placeholder(tf.float32, [B, H])
        m.c0 = tf.placeholder(tf.float32, [B, H])
        # Lookups over shards name partition_strategy "div": fixed_size_partitioner's shards are
        # contiguous row ranges (as the full softmax's concatenation takes them), whereas with
        # tf.compat.v1's default, "mod", row k would be looked up in shard k % N.
        # Time-major; every step's input projection in one matmul, the recurrence in a while loop.
        inputs = tf.nn.embedding_lookup(embedding, tf.transpose(m.x), partition_strategy="div")  # [STEPS,B,E]
        projected = tf.reshape(tf.matmul(tf.reshape(inputs, [-1, E]), kernel) + bias, [STEPS, B, 4 * H])

        # Read the recurrent kernel once per step, outside the loop, as TF 1.x's dynamic_rnn did (it
        # set a caching device): read inside, it would come from its ps task at every time step.
        recurrent = recurrent.read_value()

        def cell(state, z):
            h, c = state
            i, f, g, o = tf.split(z + tf.matmul(h, recurrent), 4, axis=1)
            c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            return tf.sigmoid(o) * tf.tanh(c), c

        hs, cs = tf.scan(cell, projected, initializer=(m.h0, m.c0))
        m.h1, m.c1 = hs[-1], cs[-1]
        hidden = tf.reshape(hs, [-1, H])
        labels = tf.reshape(tf.transpose(m.y), [-1])
        # The full softmax gathers the shards at the worker, as TF 1.x did; validation always uses it.
        logits = tf.matmul(hidden, tf.concat(list(softmax_w), 0), transpose_b=True) + tf.concat(list(softmax_b), 0)
        nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        m.nll_sum = tf.reduce_sum(nll)
        if a.full_softmax:
            m.loss = tf.reduce_mean(nll)
        else:
            m.loss = tf.reduce_mean(tf.nn.sampled_softmax_loss(list(softmax_w), list(softmax_b), labels[:, None],
                                                               hidden, SAMPLES, vocab, partition_strategy="div"))

        m.opt = tf.train.AdamOptimizer(LR, epsilon=1e-7)  # Keras's epsilon
        if a.sync:
            m.opt = tf.train.SyncReplicasOptimizer(m.opt, replicas_to_aggregate=a.workers - a.backup_workers,
                                                   total_num_replicas=a.workers)
        grads, variables = zip(*m.opt.compute_gradients(m.loss))
        grads, _ = tf.clip_by_global_norm(grads, CLIP)
        m.train = m.opt.apply_gradients(zip(grads, variables), global_step=global_step)
        m.global_step = global_step
    return m


def work(a):
    import numpy as np
    import tensorflow.compat.v1 as tf
    tf.disable_eager_execution()
    chief, W = a.task == 0, a.workers
    srv = server(tf, a, "worker", a.task)
    train, valid, vocab = corpus(a.vocab)
    train, valid = train[:a.max_train_tokens], valid[:a.max_valid_tokens]
    n = len(train)
    shares = [train[w * n // W:(w + 1) * n // W] for w in range(W)]
    mine = segments(shares[a.task], a.batch)
    per_epoch = min(((len(s) - 1) // a.batch) // STEPS for s in shares)
    # The run ends at a global step, as StopAtStepHook ends TF 1.x training: asynchronous, every
    # worker step is an update; synchronous, every worker steps about once per update.
    last = a.max_steps if a.max_steps is not None else a.epochs * per_epoch * (1 if a.sync else W)
    if per_epoch < 1 or last // (1 if a.sync else W) <= a.warmup:
        raise SystemExit(f"tf_lm_cluster: too few steps per worker for {a.warmup} warm-up steps")
    if not a.no_eval and not segments(valid, a.batch):
        raise SystemExit("tf_lm_cluster: too few validation tokens for one segment")

    tf.set_random_seed(0)
    m = build(tf, a, vocab)
    # Each worker's sessions see the ps tasks and its own task only, so no worker waits for others.
    config = tf.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{a.task}"])
    hooks = [tf.train.StopAtStepHook(last_step=last)]
    if a.sync:
        hooks.append(m.opt.make_session_run_hook(chief))
        more_tokens = m.opt.get_init_tokens_op(W)
    if chief:
        log(f"tf_lm_cluster: tensorflow {tf.__version__}, vocab {vocab}, {n} training tokens, {W} workers, "
            f"{a.ps} ps, {'sync' if a.sync else 'async'}, {'full' if a.full_softmax else 'sampled'} softmax, "
            f"{last} global steps ({per_epoch} steps per worker and epoch)")
    zero = np.zeros((a.batch, a.hidden), np.float32)
    step, t0 = 0, None
    # A plain session besides the training session, for what is not a training step: the monitored
    # session's hooks would see these runs, and it refuses any once the last step is reached.
    # (Its waits are bounded by the supervisor, which kills every task when the time is up.)
    with tf.Session(srv.target, config=config) as plain:
        if not chief:
            # MonitoredTrainingSession looks for the chief's initialization every 30 s; look more often.
            uninitialized = tf.report_uninitialized_variables(tf.global_variables())
            while len(plain.run(uninitialized)):
                time.sleep(0.1)
        with tf.train.MonitoredTrainingSession(master=srv.target, is_chief=chief, hooks=hooks, config=config,
                                               log_step_count_steps=None) as sess:
            # Everyone starts together: the clocks then measure the cluster at work, and with --sync
            # every worker's first gradients count.
            plain.run(m.ready_add)
            while plain.run(m.ready) < W:
                time.sleep(0.01)
            while not sess.should_stop():
                if step % per_epoch == 0:
                    h, c = zero, zero
                if step == a.warmup:
                    t0 = time.monotonic()
                x, y = mine[step % per_epoch]
                _, loss, h, c = sess.run([m.train, m.loss, m.h1, m.c1], {m.x: x, m.y: y, m.h0: h, m.c0: c})
                step += 1
                if chief and step % 100 == 0:
                    log(f"tf_lm_cluster: step {step} loss {loss:.3f}")
            t1 = time.monotonic()
            plain.run(m.done_add)
            result = {"steps": step, "words": max(step - a.warmup, 0) * a.batch * STEPS, "t0": t0 or t1, "t1": t1}
            if chief:
                # Wait for the others: with --sync they need this session's queue runner. A worker
                # still in a step when the last update was applied can wait for a token that only a
                # further update would bring; hand out spare tokens so that it finishes.
                while plain.run(m.done) < W:
                    if a.sync:
                        plain.run(more_tokens)
                    time.sleep(0.5)
                result["global_step"] = int(plain.run(m.global_step))
                result["valid_ppl"] = float("nan") if a.no_eval else evaluate(plain, m, valid, a)
            print(json.dumps(result), flush=True)
            if chief and a.sync:
                # The queue runner now waits for gradients that will never come: closing the session
                # would cancel it after stop_grace_period_secs, with a traceback. The run is over
                # and the supervisor ends the other tasks: leave at once.
                os._exit(0)


def evaluate(sess, m, valid, a):
    """Validation perplexity with the full softmax, state carried across segments from zero."""
    import numpy as np
    h = c = np.zeros((a.batch, a.hidden), np.float32)
    nll, count = 0.0, 0
    for x, y in segments(valid, a.batch):
        s, h, c = sess.run([m.nll_sum, m.h1, m.c1], {m.x: x, m.y: y, m.h0: h, m.c0: c})
        nll, count = nll + float(s), count + x.size
    return float(np.exp(nll / count))


def main():
    argv = sys.argv[1:]
    a = parse_args(argv)
    if a.role is None:
        try:
            supervise(a, argv)
        except KeyboardInterrupt:
            sys.exit("tf_lm_cluster: interrupted")
    elif a.role == "ps":
        import tensorflow.compat.v1 as tf
        tf.disable_eager_execution()
        server(tf, a, "ps", a.task).join()
    else:
        work(a)


if __name__ == "__main__":
    main()
